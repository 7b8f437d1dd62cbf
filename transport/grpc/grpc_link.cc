#include "transport/grpc/grpc_link.h"

#include <spdlog/spdlog.h>

#include <pthread.h>

#include <cstring>

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
  for (auto it = sinks_.begin(); it != sinks_.end();) {
    if (mine(it->first)) {
      bytes += it->second.got;
      it = sinks_.erase(it);
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

int64_t ExchangeInbox::HeapBytes() const {
  int64_t bytes = 0;
  for (const auto& [key, message] : complete_) bytes += static_cast<int64_t>(message.size());
  for (const auto& [key, part] : partial_) bytes += static_cast<int64_t>(part.bytes.size());
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
    if (auto sink = sinks_.find(key); sink != sinks_.end()) {
      // Straight into the receiver's memory. A message sent again from its
      // start (the sender reopened a broken stream) starts over.
      Sink& k = sink->second;
      if (offset == 0 && k.got < k.total) k.got = 0;
      if (offset != k.got)
        return refuse(
            Status::DataLoss("frame of message " + std::to_string(message) + " from device " + std::to_string(from) +
                             (k.got == k.total ? " arrived twice" : " arrived out of order")),
            &dropped_.unexpected);
      std::memcpy(k.dst + offset, data.data(), data.size());
      k.got += size;
      if (k.got < k.total) return Status::OK();
    } else if (offset == 0 && size == total) {
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
      if (static_cast<int64_t>(p.bytes.size()) < total) {
        heap_peak_bytes_ = std::max(heap_peak_bytes_, HeapBytes());
        return Status::OK();
      }
      complete_[key] = std::move(p.bytes);
      partial_.erase(key);
    }
    heap_peak_bytes_ = std::max(heap_peak_bytes_, HeapBytes());
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
  c.heap_bytes = HeapBytes();
  c.heap_peak_bytes = heap_peak_bytes_;
  return c;
}

Status ExchangeInbox::WaitFor(std::unique_lock<std::mutex>& lock, const Key& key, std::chrono::milliseconds timeout) {
  const int64_t message = key.second;
  const uint32_t request = static_cast<uint32_t>(message >> 32);
  auto arrived = [&] {
    if (complete_.count(key)) return true;
    const auto sink = sinks_.find(key);
    return sink != sinks_.end() && sink->second.got == sink->second.total;
  };
  if (!cv_.wait_for(lock, timeout, [&] { return arrived() || closed_ || aborted_.count(request) != 0; }))
    return Status::DeadlineExceeded("message " + std::to_string(message & 0xffffffff) + " of request " +
                                    std::to_string(message >> 32) + " from device " + std::to_string(key.first) +
                                    " did not arrive within " + std::to_string(timeout.count()) + " ms");
  if (arrived()) return Status::OK();
  if (auto a = aborted_.find(request); a != aborted_.end()) return a->second;
  return Status::Unavailable("exchange closed (program unloaded or worker stopping)");
}

Result<std::string> ExchangeInbox::Take(int from, int64_t message, std::chrono::milliseconds timeout) {
  const auto key = std::make_pair(from, message);
  std::unique_lock<std::mutex> lock(mu_);
  TS_RETURN_IF_ERROR(WaitFor(lock, key, timeout));
  auto it = complete_.find(key);
  if (it == complete_.end()) return Status::FailedPrecondition("message went to the memory Expect named: use TakeInto");
  std::string out = std::move(it->second);
  complete_.erase(it);
  return out;
}

void ExchangeInbox::Expect(int from, int64_t message, char* dst, int64_t bytes) {
  const auto key = std::make_pair(from, message);
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_.count(static_cast<uint32_t>(message >> 32))) return;  // finished: nothing may write there
  Sink k{dst, bytes, 0};
  if (auto it = complete_.find(key); it != complete_.end() && static_cast<int64_t>(it->second.size()) == bytes) {
    std::memcpy(dst, it->second.data(), it->second.size());
    k.got = bytes;
    complete_.erase(it);
  } else if (auto p = partial_.find(key); p != partial_.end() && p->second.total == bytes) {
    std::memcpy(dst, p->second.bytes.data(), p->second.bytes.size());
    k.got = static_cast<int64_t>(p->second.bytes.size());
    partial_.erase(p);
  }
  sinks_[key] = k;
}

Status ExchangeInbox::TakeInto(int from, int64_t message, char* dst, int64_t bytes, std::chrono::milliseconds timeout) {
  const auto key = std::make_pair(from, message);
  auto wrong_size = [&](int64_t got) {
    return Status::DataLoss("message " + std::to_string(message & 0xffffffff) + " from device " + std::to_string(from) +
                            " has " + std::to_string(got) + " bytes, the program expects " + std::to_string(bytes));
  };
  std::unique_lock<std::mutex> lock(mu_);
  TS_RETURN_IF_ERROR(WaitFor(lock, key, timeout));
  if (auto sink = sinks_.find(key); sink != sinks_.end()) {
    const Sink k = sink->second;
    sinks_.erase(sink);
    if (k.total != bytes) return wrong_size(k.total);
    if (k.dst != dst) std::memmove(dst, k.dst, static_cast<size_t>(bytes));
    return Status::OK();
  }
  auto it = complete_.find(key);
  if (static_cast<int64_t>(it->second.size()) != bytes) return wrong_size(static_cast<int64_t>(it->second.size()));
  std::memcpy(dst, it->second.data(), static_cast<size_t>(bytes));
  complete_.erase(it);
  return Status::OK();
}

void ExchangeInbox::Forget(int from, uint32_t request) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = sinks_.lower_bound({from, int64_t{request} << 32});
       it != sinks_.end() && it->first.first == from && static_cast<uint32_t>(it->first.second >> 32) == request;)
    it = sinks_.erase(it);
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
  // Named so a thread view (top -H, /proc/PID/task/*/comm) tells the link's
  // threads from the compute (bench/cluster-emulated --free-transport).
  pthread_setname_np(writer_.native_handle(), "ts-link-send");
}

PeerSender::~PeerSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();  // undelivered messages of a program being unloaded
    borrowed_.clear();
  }
  cv_.notify_all();
  sent_cv_.notify_all();
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
  ++copied_messages_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Unavailable("link to device " + std::to_string(to_) + " is closed");
    Outgoing o;
    o.message = message;
    o.size = bytes.size();
    o.owned = std::move(bytes);
    queue_.push_back(std::move(o));
  }
  cv_.notify_all();
  return Status::OK();
}

Status PeerSender::SendBorrowed(int64_t message, const char* data, size_t size) {
  payload_bytes_ += static_cast<int64_t>(size);
  ++messages_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Status::Unavailable("link to device " + std::to_string(to_) + " is closed");
    Outgoing o;
    o.message = message;
    o.data = data;
    o.size = size;
    queue_.push_back(std::move(o));
    borrowed_.insert(message);
  }
  cv_.notify_all();
  return Status::OK();
}

Status PeerSender::WaitSent(int64_t message, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (sent_cv_.wait_until(lock, deadline, [&] { return !borrowed_.count(message); })) return Status::OK();
  return Status::DeadlineExceeded("message " + std::to_string(message & 0xffffffff) + " of request " +
                                  std::to_string(message >> 32) + " to device " + std::to_string(to_) + " (" +
                                  address_ + ") was not sent by the request's deadline");
}

void PeerSender::Release(int64_t message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    borrowed_.erase(message);
  }
  sent_cv_.notify_all();
}

void PeerSender::Drop(uint32_t request) {
  auto mine = [request](int64_t message) {
    return static_cast<uint32_t>(static_cast<uint64_t>(message) >> 32) == request;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (it->data && mine(it->message)) {
        borrowed_.erase(it->message);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // What can be left of the request is the message the writer took last
  // (current_, set when it was taken): once marked abandoned under read_mu_
  // the writer never reads it again.
  {
    std::lock_guard<std::mutex> lock(read_mu_);
    if (current_ >= 0 && mine(current_)) abandoned_ = true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = borrowed_.begin(); it != borrowed_.end();) it = mine(*it) ? borrowed_.erase(it) : std::next(it);
}

LinkCountersSnapshot PeerSender::counters() const {
  return {from_, to_, payload_bytes_.load(), wire_bytes_.load(), messages_.load(), copied_messages_.load()};
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
  pthread_setname_np(ack_reader_.native_handle(), "ts-link-ack");
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

bool PeerSender::WriteMessage(const Outgoing& item, bool* released) {
  const int64_t total = static_cast<int64_t>(item.size);
  int64_t offset = 0;
  do {
    const size_t n = std::min(kExchangeFrameBytes, item.size - static_cast<size_t>(offset));
    const bool last = offset + static_cast<int64_t>(n) == total;
    proto::TensorFrame frame;
    frame.set_plan_id(plan_id_);
    frame.set_from_device(from_);
    frame.set_message(item.message);
    frame.set_offset(offset);
    frame.set_total_bytes(total);
    // The frame's own copy (the transport's framing). A borrowed message is
    // read under read_mu_ unless its request dropped it, and given back
    // once its last bytes are copied.
    if (item.data) {
      {
        std::lock_guard<std::mutex> lock(read_mu_);
        if (abandoned_) return true;  // its request ended (failed): nothing more of it goes out
        frame.set_data(item.data + offset, n);
      }
      if (last) {
        Release(item.message);
        *released = true;
      }
    } else {
      frame.set_data(item.owned.data() + offset, n);
    }
    frame.set_seq(frame_seq_++);
    wire_bytes_ += static_cast<int64_t>(frame.ByteSizeLong());
    if (!stream_->Write(frame)) return false;
    offset += static_cast<int64_t>(n);
  } while (offset < total);
  return true;
}

void PeerSender::WriterLoop() {
  for (;;) {
    Outgoing item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      std::lock_guard<std::mutex> read_lock(read_mu_);
      current_ = item.data ? item.message : -1;
      abandoned_ = false;
    }
    // A stream found broken (the peer restarted) is reopened and the
    // message sent again from its start, once (a borrowed message only
    // while its memory is still the link's).
    bool sent = false, released = false;
    if (stream_ && stream_ended_) CloseStream();
    for (int attempt = 0; attempt < 2 && !sent && !released; ++attempt) {
      if (!stream_ && !OpenStream()) break;
      sent = WriteMessage(item, &released);
      if (!sent) {
        spdlog::warn("exchange stream {} -> {} ({}) broke; reopening", from_, to_, address_);
        CloseStream();
      }
    }
    if (!sent) spdlog::warn("message {} for device {} ({}) could not be sent", item.message, to_, address_);
    if (item.data && !released) Release(item.message);
    std::lock_guard<std::mutex> read_lock(read_mu_);
    current_ = -1;
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

void GrpcLink::Expect(int64_t message, void* dst, size_t bytes) {
  const auto id = ComposeMessageId(request_, message);
  if (id.ok()) inbox_->Expect(peer_, *id, static_cast<char*>(dst), static_cast<int64_t>(bytes));
}

Status GrpcLink::RecvInto(int64_t message, void* dst, size_t bytes, std::chrono::milliseconds timeout) {
  TS_ASSIGN_OR_RETURN(int64_t id, ComposeMessageId(request_, message));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
  return inbox_->TakeInto(peer_, id, static_cast<char*>(dst), static_cast<int64_t>(bytes),
                          std::max(std::chrono::milliseconds(0), std::min(timeout, left)));
}

Status GrpcLink::SendFrom(int64_t message, const void* data, size_t bytes) {
  if (!sender_) return Status::FailedPrecondition("no exchange stream to device " + std::to_string(peer_));
  TS_ASSIGN_OR_RETURN(int64_t id, ComposeMessageId(request_, message));
  bytes_sent_ += static_cast<int64_t>(bytes);
  return sender_->SendBorrowed(id, static_cast<const char*>(data), bytes);
}

Status GrpcLink::WaitSent(int64_t message) {
  TS_ASSIGN_OR_RETURN(int64_t id, ComposeMessageId(request_, message));
  return sender_ ? sender_->WaitSent(id, deadline_) : Status::OK();
}

void GrpcLink::Detach() {
  inbox_->Forget(peer_, request_);
  if (sender_) sender_->Drop(request_);
}

std::string GrpcLink::description() const {
  return "grpc " + (sender_ ? sender_->address() : std::string("?")) + " (device " + std::to_string(peer_) + ")";
}

}  // namespace tessera
