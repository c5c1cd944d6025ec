// The shm road's rings: memfds made and mapped, and the free space of
// the ring a sender copies frames into.
#include "actors/road/road_ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

// -- ring_space ---------------------------------------------------------------

ring_space::ring_space(size_t bytes) {
  free_.emplace_back(0, bytes);
}

size_t ring_space::take(size_t n) {
  n = (n + 63) & ~size_t{63};
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto i = free_.begin(); i != free_.end(); ++i)
    if (i->second >= n) {
      auto off = i->first;
      i->first += n;
      i->second -= n;
      if (i->second == 0)
        free_.erase(i);
      taken_.emplace(off, n);
      return off;
    }
  return SIZE_MAX;
}

bool ring_space::give(size_t offset, size_t n) {
  n = (n + 63) & ~size_t{63};
  std::lock_guard<std::mutex> guard{mtx_};
  auto t = taken_.find(offset);
  if (t == taken_.end() || t->second != n)
    return false;
  taken_.erase(t);
  auto i = std::lower_bound(free_.begin(), free_.end(),
                            std::make_pair(offset, size_t{0}));
  i = free_.emplace(i, offset, n);
  if (auto next = i + 1;
      next != free_.end() && i->first + i->second == next->first) {
    i->second += next->second;
    free_.erase(next);
  }
  if (i != free_.begin()) {
    auto prev = i - 1;
    if (prev->first + prev->second == i->first) {
      prev->second += i->second;
      free_.erase(i);
    }
  }
  return true;
}

size_t ring_space::free_bytes() const {
  std::lock_guard<std::mutex> guard{mtx_};
  size_t n = 0;
  for (auto& f : free_)
    n += f.second;
  return n;
}

// -- memfd rings --------------------------------------------------------------

namespace road_detail {

caf::expected<int> make_ring_fd(size_t bytes) {
  int fd = ::memfd_create("troupe-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return sys_error("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
          0) {
    auto err = sys_error("ring setup");
    ::close(fd);
    return err;
  }
  return fd;
}

uint8_t* map_ring(int fd, size_t bytes) {
  auto* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

} // namespace road_detail

using namespace road_detail;

caf::error road_conn::map_rings(int out_fd, int in_fd, size_t bytes) {
  out_.base = map_ring(out_fd, bytes);
  in_.base = map_ring(in_fd, bytes);
  out_.bytes = in_.bytes = bytes; // the destructor unmaps what was mapped
  if (!out_.base || !in_.base)
    return sys_error("mmap of a road ring");
  out_space_ = std::make_unique<ring_space>(bytes);
  return caf::none;
}

void road_conn::released(uint64_t offset, uint64_t bytes) {
  if (!out_space_ || !out_space_->give(offset, bytes))
    fail(caf::make_error(errc::malformed_message,
                         "road: release of a ring region not in use"));
}

} // namespace troupe
