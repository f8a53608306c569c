// Small RAII owners of kernel resources: file descriptors and memory mappings.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <utility>

namespace spyre {

class UniqueFd {
  public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

class Mapping {
  public:
    Mapping() = default;
    Mapping(void* addr, size_t length) : addr_(addr), length_(length) {}
    Mapping(Mapping&& o) noexcept
        : addr_(std::exchange(o.addr_, nullptr)), length_(std::exchange(o.length_, 0)) {}
    Mapping& operator=(Mapping&& o) noexcept {
        if (this != &o) {
            reset();
            addr_ = std::exchange(o.addr_, nullptr);
            length_ = std::exchange(o.length_, 0);
        }
        return *this;
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() { reset(); }

    void* get() const { return addr_; }
    size_t length() const { return length_; }
    explicit operator bool() const { return addr_ != nullptr; }
    void reset() {
        if (addr_) ::munmap(addr_, length_);
        addr_ = nullptr;
        length_ = 0;
    }

  private:
    void* addr_ = nullptr;
    size_t length_ = 0;
};

}  // namespace spyre
