// One ublk hardware queue, served on a reactor of its own the way
// ublksrv's targets run: each tag is a small state machine (fetched, its
// request on the backend's asynchronous calls, committed and fetched
// again), and FETCH and COMMIT_AND_FETCH go on the reactor's ring beside
// the engine's own cache I/O for hits. One thread keeps the queue's whole
// depth in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cachecore/devices/reactor.h"
#include "shim/block_backend.h"

struct ublksrv_io_desc;

namespace shim {

class UblkQueue {
 public:
  // `char_fd`: the device's /dev/ublkc<id>; `id`: the queue; `depth` tags,
  // each with a buffer of `max_io` bytes. The backend outlives the queue.
  UblkQueue(BlockBackend* backend, int char_fd, uint16_t id, uint16_t depth, uint32_t max_io);
  ~UblkQueue();
  UblkQueue(const UblkQueue&) = delete;
  UblkQueue& operator=(const UblkQueue&) = delete;

  // On the calling thread, which becomes the queue's thread: sets up (the
  // reactor, the descriptors, the buffers) and reports it to `set_up` (OK,
  // or why not), which says whether to go on (the device starts only when
  // every queue could set up); if not, returns having fetched nothing.
  // Otherwise fetches on every tag, calls `fetching` once the fetches are
  // in the kernel's hands, and serves until the device stops (every tag
  // aborted).
  void Run(const std::function<bool(const Status&)>& set_up, const std::function<void()>& fetching);

 private:
  struct Tag;
  class FetchAll;
  Status SetUp();
  void Fetched(Tag& tag, int result);
  void Commit(Tag& tag);

  BlockBackend* backend_;
  int char_fd_;
  uint16_t id_, depth_;
  uint32_t max_io_;
  std::unique_ptr<cachecore::Reactor> reactor_;
  const ublksrv_io_desc* descs_ = nullptr;  // the driver's, mapped read-only
  size_t descs_bytes_ = 0;
  uint8_t* buffers_ = nullptr;  // depth_ x max_io_, touched only as used
  std::vector<std::unique_ptr<Tag>> tags_;
  uint16_t live_ = 0;  // tags not yet aborted
  std::function<void()> fetching_;
};

}  // namespace shim
