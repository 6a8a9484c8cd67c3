// WorkerPool: a fixed set of threads running queued NBD requests.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace shim {

class NbdConnection;
struct NbdRequest;

class WorkerPool {
 public:
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();  // finishes what is queued, then stops
  void Submit(std::shared_ptr<NbdConnection> connection, NbdRequest* request);

 private:
  struct Job {
    std::shared_ptr<NbdConnection> connection;
    NbdRequest* request;
  };
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace shim
