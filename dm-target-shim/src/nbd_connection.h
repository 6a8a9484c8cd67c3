// One NBD client connection: the handshake, then a reader that parses
// requests and hands them to the worker pool, whose threads run them and
// send the replies as they complete.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "cachecore/block_device.h"
#include "shim/nbd_server.h"

namespace shim {

class WorkerPool;

struct NbdRequest;

class NbdConnection : public std::enable_shared_from_this<NbdConnection> {
 public:
  // handshake: false for a peer that is already past it (the kernel).
  NbdConnection(int fd, NbdBackend* backend, const NbdServerOptions* options, WorkerPool* pool,
                bool handshake = true);
  ~NbdConnection();
  // Runs the whole connection on the calling thread; returns when it ends.
  void Serve();
  // Ends the connection from another thread (server shutdown).
  void Interrupt();

  // Called by a worker thread.
  void Execute(NbdRequest* request);

 private:
  bool Handshake();
  bool HandleOption(uint32_t option, const std::vector<uint8_t>& data, bool* go);
  bool SendOptionReply(uint32_t option, uint32_t type, const uint8_t* data, uint32_t len);
  bool SendExportInfo(uint32_t option);
  bool ExportNameMatches(const std::string& name) const;
  uint16_t TransmissionFlags() const;
  void Transmit();
  // Checks a request's range; 0 when it is fine, else the protocol errno.
  uint32_t CheckRange(uint16_t type, uint64_t offset, uint32_t length) const;
  void Reply(uint64_t handle, uint32_t error, const void* data, uint32_t len);
  NbdRequest* TakeRequest();
  void ReturnRequest(NbdRequest* request);
  Status WriteZeroes(uint64_t offset, uint64_t length, bool fua);

  int fd_;
  bool handshake_;
  NbdBackend* backend_;
  const NbdServerOptions* options_;
  WorkerPool* pool_;
  std::mutex write_mu_;  // one reply on the socket at a time
  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<NbdRequest>> all_requests_;
  std::vector<NbdRequest*> free_requests_;
  size_t in_flight_ = 0;
};

}  // namespace shim
