// In-process Link: two mailboxes shared by the two ends. Used by tests and by
// `tessera run --plan`, which runs every device program in one process.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "transport/link.h"

namespace tessera {

Status Link::RecvInto(int64_t message, void* dst, size_t bytes, std::chrono::milliseconds timeout) {
  TS_ASSIGN_OR_RETURN(std::string got, Recv(message, timeout));
  // The receiver checks sizes against its program before accepting (ARCHITECTURE.md wire rules).
  if (got.size() != bytes)
    return Status::DataLoss("message " + std::to_string(message) + " on " + description() + " has " +
                            std::to_string(got.size()) + " bytes, the program expects " + std::to_string(bytes));
  std::memcpy(dst, got.data(), bytes);
  return Status::OK();
}

Status Link::SendFrom(int64_t message, const void* data, size_t bytes) {
  return Send(message, std::string(static_cast<const char*>(data), bytes));
}

namespace {

// Messages addressed to one end, by id.
class Mailbox {
 public:
  void Put(int64_t id, std::string bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      box_[id] = std::move(bytes);
    }
    cv_.notify_all();
  }
  Result<std::string> Take(int64_t id, std::chrono::milliseconds timeout, const std::string& who) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return box_.count(id) != 0 || closed_; }))
      return Status::DeadlineExceeded(who + ": message " + std::to_string(id) + " did not arrive within " +
                                      std::to_string(timeout.count()) + " ms");
    auto it = box_.find(id);
    if (it == box_.end()) return Status::Unavailable(who + ": link closed while waiting for message " + std::to_string(id));
    std::string out = std::move(it->second);
    box_.erase(it);
    return out;
  }
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::string> box_;  // GUARDED_BY(mu_)
  bool closed_ = false;                 // GUARDED_BY(mu_)
};

class InProcessLink final : public Link {
 public:
  InProcessLink(std::shared_ptr<Mailbox> inbox, std::shared_ptr<Mailbox> outbox, std::string name)
      : inbox_(std::move(inbox)), outbox_(std::move(outbox)), name_(std::move(name)) {}
  ~InProcessLink() override { outbox_->Close(); }

  Status Send(int64_t message, std::string bytes) override {
    bytes_sent_ += static_cast<int64_t>(bytes.size());
    outbox_->Put(message, std::move(bytes));
    return Status::OK();
  }
  Result<std::string> Recv(int64_t message, std::chrono::milliseconds timeout) override {
    return inbox_->Take(message, timeout, name_);
  }
  int64_t bytes_sent() const override { return bytes_sent_; }
  std::string description() const override { return "inproc " + name_; }

 private:
  const std::shared_ptr<Mailbox> inbox_, outbox_;
  const std::string name_;
  std::atomic<int64_t> bytes_sent_{0};
};

}  // namespace

std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> MakeInProcessLinkPair(const std::string& a_name,
                                                                             const std::string& b_name) {
  auto to_a = std::make_shared<Mailbox>(), to_b = std::make_shared<Mailbox>();
  return {std::make_unique<InProcessLink>(to_a, to_b, a_name + "->" + b_name),
          std::make_unique<InProcessLink>(to_b, to_a, b_name + "->" + a_name)};
}

}  // namespace tessera
