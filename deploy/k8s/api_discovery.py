#!/usr/bin/env python3
"""The discovery part of a Kubernetes API server, alone, for checking manifests
offline: kubectl's client-side dry run (--dry-run=client) needs only to
know which kinds exist at which versions, and this answers exactly that,
for the kinds deploy/k8s/ uses (v1: Service, Secret, ConfigMap; apps/v1:
Deployment, StatefulSet). It holds no objects and accepts no writes.

usage: api_discovery.py PORT_FILE   (listens on a free loopback port, writes it)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def resources(group_version, kinds):
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": plural, "singularName": plural[:-1], "namespaced": True,
             "kind": kind, "verbs": ["create", "get", "list", "patch"]}
            for plural, kind in kinds
        ],
    }


PATHS = {
    "/api": {"kind": "APIVersions", "versions": ["v1"],
             "serverAddressByClientCIDRs": [
                 {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/api/v1": resources("v1", [("services", "Service"),
                                ("secrets", "Secret"),
                                ("configmaps", "ConfigMap")]),
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1",
                                       "version": "v1"}],
         "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
    "/apis/apps/v1": resources("apps/v1", [("deployments", "Deployment"),
                                           ("statefulsets", "StatefulSet")]),
}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = PATHS.get(self.path.split("?")[0])
        status = 200
        if body is None:
            status = 404
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404,
                    "message": "this server answers discovery only"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1], "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
