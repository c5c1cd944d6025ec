// Taking, loading and restoring a shard server's checkpointed state.
#include "actors/server/server_checkpoint.hpp"

#include "actors/server/server_optimizer.hpp"
#include "messages/errors.hpp"

namespace troupe {

caf::expected<std::unique_ptr<resume_set>>
load_resume_set(const checkpoint_settings& cfg, bool check_flags) {
  auto m = read_manifest(cfg.dir);
  if (!m)
    return caf::make_error(
        errc::bad_file, "no checkpoint to resume from in " + cfg.dir + " (" +
                            describe(m.error()) + "); start without --resume");
  auto out = std::make_unique<resume_set>();
  out->manifest = std::move(*m);
  out->files.reserve(out->manifest.files.size());
  for (auto& name : out->manifest.files) {
    auto f = read_checkpoint(cfg.dir + "/" + name);
    if (!f)
      return std::move(f.error());
    if (check_flags && (f->mode != cfg.mode || f->optimizer != cfg.optimizer))
      return caf::make_error(
          errc::invalid_config,
          "the checkpoint in " + cfg.dir +
              " was written with --server.mode=" + f->mode + " and optimizer " +
              f->optimizer + "; this server runs --server.mode=" + cfg.mode +
              " and " + cfg.optimizer + ": use the same flags to resume");
    if (f->generation != out->manifest.generation)
      return caf::make_error(errc::bad_file,
                             cfg.dir + "/" + name + " holds generation " +
                                 std::to_string(f->generation) +
                                 ", the manifest names " +
                                 std::to_string(out->manifest.generation));
    out->files.push_back(std::move(*f));
  }
  for (auto& f : out->files)
    for (auto& st : f.stores)
      for (auto& s : st.slices) {
        auto& at = out->slices[s.id];
        if (at.first == nullptr || st.version > at.first->version)
          at = {&st, &s};
      }
  return out;
}

store_snapshot snapshot_of(shard_store& s) {
  auto out = s.snapshot();
  if (auto* opt = optimizer_of(s.hook()))
    for (auto& x : out.slices)
      opt->save(x);
  return out;
}

store_snapshot restorable(const resume_set& set, const shard_store& s) {
  store_snapshot out;
  std::map<const store_snapshot*, size_t> votes;
  for (auto& [id, floats] : s.owned()) {
    auto i = set.slices.find(id);
    if (i == set.slices.end() || s.initialised({id}) ||
        i->second.second->floats != floats || !i->second.second->ready)
      continue;
    out.slices.push_back(*i->second.second);
    ++votes[i->second.first];
  }
  const store_snapshot* meta = nullptr;
  for (auto& [st, n] : votes)
    if (meta == nullptr || n > votes[meta])
      meta = st;
  if (meta != nullptr && !set.meta_applied) {
    out.version = meta->version;
    out.rounds = meta->rounds;
    out.workers = meta->workers;
  }
  return out;
}

caf::expected<size_t> apply_restore(shard_store& s,
                                    const store_snapshot& snap) {
  std::map<slice_id, const slice_snapshot*> by_id;
  for (auto& x : snap.slices)
    by_id.emplace(x.id, &x);
  auto n = s.restore(snap.version, snap.rounds, snap.workers, by_id);
  if (auto* opt = optimizer_of(s.hook()))
    for (auto& x : snap.slices)
      if (s.owns(x.id))
        if (auto err = opt->load(x))
          return err;
  return n;
}

} // namespace troupe
