#include "transport/grpc/grpc_link.h"

#include <spdlog/spdlog.h>

#include "transport/grpc/grpc_channel.h"
#include "util/limits.h"

namespace tessera {

Result<int64_t> ComposeMessageId(uint32_t request, int64_t message) {
  if (message < 0 || message >= (int64_t{1} << 32))
    return Status::InvalidArgument("message id " + std::to_string(message) + " does not fit 32 bits");
  if (request >= (1u << 31)) return Status::InvalidArgument("request id " + std::to_string(request) + " >= 2^31");
  return (static_cast<int64_t>(request) << 32) | message;
}

// ---- ExchangeInbox ----------------------------------------------------------

ExchangeInbox::ExchangeInbox(std::map<std::pair<int, int64_t>, int64_t> expected) : expected_(std::move(expected)) {}

void ExchangeInbox::CountDrop(int64_t bytes, int64_t* reason) {
  ++dropped_.frames;
  dropped_.bytes += bytes;
  ++*reason;
}

int64_t ExchangeInbox::Discard(uint32_t request, int from) {
  auto mine = [&](const Key& k) { return static_cast<uint32_t>(k.second >> 32) == request && (from < 0 || k.first == from); };
  int64_t bytes = 0;
  for (auto it = complete_.begin(); it != complete_.end();) {
    if (mine(it->first)) {
      bytes += static_cast<int64_t>(it->second.size());
      it = complete_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (mine(it->first)) {
      bytes += static_cast<int64_t>(it->second.bytes.size());
      it = partial_.erase(it);
    } else {
      ++it;
    }
  }
  return bytes;
}

void ExchangeInbox::ExpireEarly(std::chrono::steady_clock::time_point now) {
  for (auto& [from, requests] : early_) {
    for (auto it = requests.begin(); it != requests.end();) {
      if (now - it->second > std::chrono::milliseconds(kEarlyExchangeHoldMs)) {
        CountDrop(Discard(it->first, from), &dropped_.early_over_limit);
        it = requests.erase(it);
      } else {
        ++it;
      }
    }
  }
}

int64_t ExchangeInbox::EarlyBytes() const {
  int64_t bytes = 0;
  for (const auto& [from, requests] : early_) {
    for (const auto& [request, since] : requests) {
      for (auto it = complete_.lower_bound({from, int64_t{request} << 32});
           it != complete_.end() && it->first.first == from && static_cast<uint32_t>(it->first.second >> 32) == request; ++it)
        bytes += static_cast<int64_t>(it->second.size());
      for (auto it = partial_.lower_bound({from, int64_t{request} << 32});
           it != partial_.end() && it->first.first == from && static_cast<uint32_t>(it->first.second >> 32) == request; ++it)
        bytes += static_cast<int64_t>(it->second.bytes.size());
    }
  }
  return bytes;
}

void ExchangeInbox::BeginRequest(uint32_t request) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.insert(request);
  finished_.erase(request);  // an id used again (the gateway's ids wrap at 2^31)
  for (auto& [from, requests] : early_) requests.erase(request);  // its early frames are now its own
  ExpireEarly(std::chrono::steady_clock::now());
}

void ExchangeInbox::FinishRequest(uint32_t request) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(request);
  aborted_.erase(request);
  for (auto& [from, requests] : early_) requests.erase(request);
  // Frames that arrived but were never taken (the request failed half-way).
  const int64_t left = Discard(request, -1);
  if (left > 0) CountDrop(left, &dropped_.finished);
  if (finished_.insert(request).second) {
    finished_order_.push_back(request);
    if (finished_order_.size() > static_cast<size_t>(kRememberedFinishedRequests)) {
      finished_.erase(finished_order_.front());
      finished_order_.pop_front();
    }
  }
}

Status ExchangeInbox::Deliver(int from, int64_t message, int64_t offset, int64_t total, const std::string& data) {
  const int64_t size = static_cast<int64_t>(data.size());
  const uint32_t request = static_cast<uint32_t>(static_cast<uint64_t>(message) >> 32);
  const int64_t program_message = message & 0xffffffff;
  const auto key = std::make_pair(from, message);
  auto refuse = [&](Status st, int64_t* reason) {
    CountDrop(size, reason);
    return st;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto want = expected_.find({from, program_message});
    if (message < 0 || want == expected_.end())
      return refuse(Status::InvalidArgument("device " + std::to_string(from) + " sent message " +
                                            std::to_string(program_message) +
                                            ", which this device's program does not receive from it; dropped"),
                    &dropped_.unexpected);
    if (total != want->second)
      return refuse(Status::InvalidArgument("message " + std::to_string(program_message) + " from device " +
                                            std::to_string(from) + " announces " + std::to_string(total) +
                                            " bytes; the program receives " + std::to_string(want->second) +
                                            "; dropped"),
                    &dropped_.unexpected);
    if (offset < 0 || offset + size > total) {
      partial_.erase(key);
      return refuse(Status::DataLoss("frame of message " + std::to_string(message) + " from device " +
                                     std::to_string(from) + " lies outside the message (offset " +
                                     std::to_string(offset) + ", total " + std::to_string(total) + ")"),
                    &dropped_.unexpected);
    }
    if (!running_.count(request)) {
      if (finished_.count(request))
        return refuse(Status::FailedPrecondition("request " + std::to_string(request) +
                                                 " already finished on this device; frame dropped"),
                      &dropped_.finished);
      const auto now = std::chrono::steady_clock::now();
      ExpireEarly(now);
      auto& held = early_[from];
      if (!held.count(request)) {
        if (held.size() >= static_cast<size_t>(kMaxEarlyRequestsPerPeer))
          return refuse(Status::ResourceExhausted(
                            "device " + std::to_string(from) + " already has frames held for " +
                            std::to_string(held.size()) + " requests this device has not started (the limit); " +
                            "frame of request " + std::to_string(request) + " dropped"),
                        &dropped_.early_over_limit);
        held.emplace(request, now);
      }
    }
    if (offset == 0 && size == total) {
      complete_[key] = data;
    } else {
      Partial& p = partial_[key];
      if (offset == 0) p = Partial{std::string(), total};
      if (p.total != total || static_cast<int64_t>(p.bytes.size()) != offset) {
        partial_.erase(key);
        return refuse(Status::DataLoss("frame of message " + std::to_string(message) + " from device " +
                                       std::to_string(from) + " arrived out of order"),
                      &dropped_.unexpected);
      }
      if (p.bytes.empty()) p.bytes.reserve(static_cast<size_t>(total));  // the program's size, checked above
      p.bytes += data;
      if (static_cast<int64_t>(p.bytes.size()) < total) return Status::OK();
      complete_[key] = std::move(p.bytes);
      partial_.erase(key);
    }
  }
  cv_.notify_all();
  return Status::OK();
}

void ExchangeInbox::CountWrongSender(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  CountDrop(bytes, &dropped_.wrong_sender);
}

ExchangeDropCounters ExchangeInbox::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  ExchangeDropCounters c = dropped_;
  c.early_bytes_held = EarlyBytes();
  return c;
}

Result<std::string> ExchangeInbox::Take(int from, int64_t message, std::chrono::milliseconds timeout) {
  const auto key = std::make_pair(from, message);
  const uint32_t request = static_cast<uint32_t>(message >> 32);
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout,
                    [&] { return complete_.count(key) != 0 || closed_ || aborted_.count(request) != 0; }))
    return Status::DeadlineExceeded("message " + std::to_string(message & 0xffffffff) + " of request " +
                                    std::to_string(message >> 32) + " from device " + std::to_string(from) +
                                    " did not arrive within " + std::to_string(timeout.count()) + " ms");
  auto it = complete_.find(key);
  if (it == complete_.end()) {
    if (auto a = aborted_.find(request); a != aborted_.end()) return a->second;
    return Status::Unavailable("exchange closed (program unloaded or worker stopping)");
  }
  std::string out = std::move(it->second);
  complete_.erase(it);
  return out;
}

void ExchangeInbox::AbortRequest(uint32_t request, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_.count(request)) return;  // finished already: nothing waits, and nothing is kept
    aborted_.emplace(request, why);
  }
  cv_.notify_all();
}

void ExchangeInbox::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

// ---- PeerSender -------------------------------------------------------------

PeerSender::PeerSender(std::shared_ptr<grpc::Channel> channel, std::string plan_id, int from, int to,
                       std::string address)
    : plan_id_(std::move(plan_id)), from_(from), to_(to), address_(std::move(address)),
      stub_(proto::Worker::NewStub(channel)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

PeerSender::~PeerSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();  // undelivered messages of a program being unloaded
  }
  cv_.notify_all();
  {
    // Wakes a writer blocked opening a stream to a peer that is gone (gRPC
    // cancels a call whose context was cancelled before it started).
    std::lock_guard<std::mutex> lock(context_mu_);
    if (context_) context_->TryCancel();
  }
  writer_.join();
}

Status PeerSender::Send(int64_t message, std::string bytes) {
  payload_bytes_ += static_cast<int64_t>(bytes.size());
  ++messages_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Unavailable("link to device " + std::to_string(to_) + " is closed");
    queue_.emplace_back(message, std::move(bytes));
  }
  cv_.notify_all();
  return Status::OK();
}

LinkCountersSnapshot PeerSender::counters() const {
  return {from_, to_, payload_bytes_.load(), wire_bytes_.load(), messages_.load()};
}

bool PeerSender::OpenStream() {
  {
    std::lock_guard<std::mutex> lock(context_mu_);
    {
      std::lock_guard<std::mutex> stop_lock(mu_);
      if (stopping_) return false;
    }
    context_ = std::make_unique<grpc::ClientContext>();
    context_->set_wait_for_ready(true);  // the peer may still be starting
  }
  stream_ended_ = false;
  stream_ = stub_->Exchange(context_.get());
  if (!stream_) return false;
  ack_reader_ = std::thread([this, stream = stream_.get()] {
    proto::ExchangeAck ack;
    while (stream->Read(&ack))
      if (ack.code() != 0)
        spdlog::warn("device {} refused frame {} from device {}: {}", to_, ack.seq(), from_, ack.error());
    stream_ended_ = true;  // the peer went away: reopen before the next message
  });
  return true;
}

void PeerSender::CloseStream() {
  if (!stream_) return;
  context_->TryCancel();
  if (ack_reader_.joinable()) ack_reader_.join();
  stream_->Finish();
  stream_.reset();
  std::lock_guard<std::mutex> lock(context_mu_);
  context_.reset();
}

bool PeerSender::WriteMessage(int64_t message, const std::string& bytes) {
  const int64_t total = static_cast<int64_t>(bytes.size());
  int64_t offset = 0;
  do {
    const size_t n = std::min(kChunkBytes, bytes.size() - static_cast<size_t>(offset));
    proto::TensorFrame frame;
    frame.set_plan_id(plan_id_);
    frame.set_from_device(from_);
    frame.set_message(message);
    frame.set_offset(offset);
    frame.set_total_bytes(total);
    frame.set_data(bytes.substr(static_cast<size_t>(offset), n));
    frame.set_seq(frame_seq_++);
    wire_bytes_ += static_cast<int64_t>(frame.ByteSizeLong());
    if (!stream_->Write(frame)) return false;
    offset += static_cast<int64_t>(n);
  } while (offset < total);
  return true;
}

void PeerSender::WriterLoop() {
  for (;;) {
    std::pair<int64_t, std::string> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    // A stream found broken (the peer restarted) is reopened and the
    // message sent again from its start, once.
    bool sent = false;
    if (stream_ && stream_ended_) CloseStream();
    for (int attempt = 0; attempt < 2 && !sent; ++attempt) {
      if (!stream_ && !OpenStream()) break;
      sent = WriteMessage(item.first, item.second);
      if (!sent) {
        spdlog::warn("exchange stream {} -> {} ({}) broke; reopening", from_, to_, address_);
        CloseStream();
      }
    }
    if (!sent) spdlog::warn("message {} for device {} ({}) could not be sent", item.first, to_, address_);
  }
  CloseStream();
}

// ---- GrpcLink ---------------------------------------------------------------

Status GrpcLink::Send(int64_t message, std::string bytes) {
  if (!sender_) return Status::FailedPrecondition("no exchange stream to device " + std::to_string(peer_));
  TS_ASSIGN_OR_RETURN(int64_t id, ComposeMessageId(request_, message));
  bytes_sent_ += static_cast<int64_t>(bytes.size());
  return sender_->Send(id, std::move(bytes));
}

Result<std::string> GrpcLink::Recv(int64_t message, std::chrono::milliseconds timeout) {
  TS_ASSIGN_OR_RETURN(int64_t id, ComposeMessageId(request_, message));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
  return inbox_->Take(peer_, id, std::max(std::chrono::milliseconds(0), std::min(timeout, left)));
}

std::string GrpcLink::description() const {
  return "grpc " + (sender_ ? sender_->address() : std::string("?")) + " (device " + std::to_string(peer_) + ")";
}

}  // namespace tessera
