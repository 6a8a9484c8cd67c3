#include "worker_pool.h"

#include "nbd_connection.h"

namespace shim {

WorkerPool::WorkerPool(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::Submit(std::shared_ptr<NbdConnection> connection, NbdRequest* request) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back({std::move(connection), request});
  }
  cv_.notify_one();
}

void WorkerPool::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to do
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job.connection->Execute(job.request);
    job.connection.reset();
    lock.lock();
  }
}

}  // namespace shim
