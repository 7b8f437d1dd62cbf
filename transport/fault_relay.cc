#include "transport/fault_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

namespace tessera {

void ByteFaultInjector::Apply(const char* in, size_t n, std::string* out) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t i = 0; i < n; ++i) {
    ++counts_.bytes;
    if (faults_.drop > 0 && u(rng_) < faults_.drop) {
      ++counts_.dropped;
      continue;
    }
    char c = in[i];
    if (faults_.corrupt > 0 && u(rng_) < faults_.corrupt) {
      c = static_cast<char>(c ^ (1 << (rng_() % 8)));
      ++counts_.corrupted;
    }
    out->push_back(c);
    if (faults_.duplicate > 0 && u(rng_) < faults_.duplicate) {
      out->push_back(c);
      ++counts_.duplicated;
    }
  }
}

Result<RawPty> OpenRawPty() {
  RawPty pty;
  termios tio{};
  cfmakeraw(&tio);
  tio.c_cflag |= CLOCAL | CREAD;
  char name[128] = {0};
  if (openpty(&pty.master, &pty.slave, name, &tio, nullptr) != 0) return Status::FromErrno(errno, "openpty");
  pty.slave_path = name;
  return pty;
}

void ClosePty(RawPty* pty) {
  if (pty->master >= 0) close(pty->master);
  if (pty->slave >= 0) close(pty->slave);
  pty->master = pty->slave = -1;
}

SerialRelay::SerialRelay(int fd_a, int fd_b, const ByteFaults& a_to_b, const ByteFaults& b_to_a)
    : fd_a_(fd_a), fd_b_(fd_b), ab_(a_to_b), ba_(b_to_a), thread_([this] { Run(); }) {}

SerialRelay::~SerialRelay() {
  stop_ = true;
  thread_.join();
}

namespace {
bool WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, 10);
        continue;
      }
      return false;
    }
    done += static_cast<size_t>(w);
  }
  return true;
}
}  // namespace

void SerialRelay::Run() {
  char buf[4096];
  bool open_a = true, open_b = true;
  while (!stop_ && (open_a || open_b)) {
    pollfd p[2] = {{fd_a_, static_cast<short>(open_a ? POLLIN : 0), 0}, {fd_b_, static_cast<short>(open_b ? POLLIN : 0), 0}};
    if (poll(p, 2, 20) <= 0) continue;
    for (int side = 0; side < 2; ++side) {
      if (!(p[side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(side == 0 ? fd_a_ : fd_b_, buf, sizeof buf);
      if (n <= 0) {
        // EIO: nobody has the slave open (yet / any more); keep polling gently.
        if (n < 0 && errno != EIO && errno != EAGAIN && errno != EINTR) (side == 0 ? open_a : open_b) = false;
        if (p[side].revents & POLLHUP) usleep(5000);
        continue;
      }
      std::string out;
      (side == 0 ? ab_ : ba_).Apply(buf, static_cast<size_t>(n), &out);
      WriteAll(side == 0 ? fd_b_ : fd_a_, out);
      const ByteFaultCounts& c = (side == 0 ? ab_ : ba_).counts();
      int base = side * 4;
      snapshot_[base + 0] = c.bytes;
      snapshot_[base + 1] = c.corrupted;
      snapshot_[base + 2] = c.dropped;
      snapshot_[base + 3] = c.duplicated;
    }
  }
}

ByteFaultCounts SerialRelay::a_to_b() const {
  return {snapshot_[0], snapshot_[1], snapshot_[2], snapshot_[3]};
}
ByteFaultCounts SerialRelay::b_to_a() const {
  return {snapshot_[4], snapshot_[5], snapshot_[6], snapshot_[7]};
}

}  // namespace tessera
