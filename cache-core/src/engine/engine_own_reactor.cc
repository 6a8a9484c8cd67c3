// The engine's own reactor: requests made off any reactor (a caller's own
// thread) are posted to it and served there by the reactor paths, as a
// front end's reactor serves its clients'. Started on the first such
// request.
#include "base/thread_name.h"
#include "engine/engine_async.h"

namespace cachecore {

// One request taken off a reactor: posted to the engine's, and its answer
// passed on to the caller's completion.
struct OwnReactor::Posted final : ReactorTask, EngineCompletion {
  OwnReactor* owner = nullptr;
  AsyncJob job{AsyncJob::kRead};  // its `done` is this
  EngineCompletion* caller = nullptr;
  void Run() override { owner->Serve(*this); }
  void Done(Status status) override { owner->Answered(*this, std::move(status)); }
};

OwnReactor::OwnReactor(Engine::Impl& im) : im_(im), pool_(std::make_unique<RequestPool<Posted>>()) {}

OwnReactor::~OwnReactor() { Stop(); }

// Counts the request taken when it returns true: checked and counted under
// one lock, so that Stop, which waits for the count, never leaves one
// posted to a reactor that has stopped.
bool OwnReactor::Started(Status& why) {
  MutexLock lock(mu_);
  if (stopped_) {
    why = Status::Busy("the cache is shut down");
    return false;
  }
  ++outstanding_;
  if (reactor_) return true;
  // Failing (no descriptor or memory left, for now), the request fails and
  // the next one tries again.
  Result<std::unique_ptr<Reactor>> made = Reactor::Create(256);
  if (!made.ok()) {
    why = made.status();
    --outstanding_;
    return false;
  }
  reactor_ = std::move(made.value());
  thread_ = std::thread([reactor = reactor_.get()] {
    NameThisThread("cachectl-own");
    reactor->Run();
  });
  return true;
}

bool OwnReactor::Run(const AsyncJob& job, Status& why) {
  if (!Started(why)) return false;
  std::unique_ptr<Posted> posted = pool_->Take();
  posted->owner = this;
  posted->job = job;
  posted->caller = job.done;
  posted->job.done = posted.get();
  reactor_->Post(posted.release());  // set before Started returned true, never reset
  return true;
}

// On the engine's reactor. A write throttled waits there, on a timer (once:
// the flag cleared, nothing throttles it again).
void OwnReactor::Serve(Posted& posted) {
  AsyncJob job = posted.job;
  if (job.kind == AsyncJob::kWrite && job.throttle) {
    job.throttle = false;
    const std::chrono::microseconds delay = im_.Throttle(job.offset, job.length, job.bypass);
    if (delay.count() != 0) return im_.RunLater(job, delay);
  }
  im_.RunOnReactor(job, nullptr);
}

void OwnReactor::Answered(Posted& posted, Status status) {
  EngineCompletion* caller = posted.caller;
  pool_->Give(std::unique_ptr<Posted>(&posted));
  caller->Done(std::move(status));
  MutexLock lock(mu_);
  if (--outstanding_ == 0) idle_.notify_all();
}

void OwnReactor::Drain() {
  MutexLock lock(mu_);
  lock.Wait(idle_, [this] {
    mu_.AssertHeld();
    return outstanding_ == 0;
  });
}

void OwnReactor::Stop() {
  Reactor* reactor;
  {
    MutexLock lock(mu_);
    stopped_ = true;  // takes no more
  }
  Drain();
  {
    MutexLock lock(mu_);
    reactor = reactor_.get();
  }
  if (reactor == nullptr) return;
  reactor->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace cachecore
