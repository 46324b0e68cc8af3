// mapped_file.cpp: MappedFile (mmap of a whole file, page releases by file range).
#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "format/error.h"

namespace tpshard {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open: " + std::strerror(errno), "check the checkpoint directory");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw Error(path + ": fstat failed: " + std::strerror(e), "");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ == 0) return;
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    ::close(fd_);
    throw Error(path + ": mmap failed: " + std::strerror(e), "");
  }
  map_ = static_cast<uint8_t*>(m);
}

MappedFile::~MappedFile() {
  if (map_) ::munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::drop_pages(uint64_t offset, uint64_t n) const {
  if (!n || !map_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const uint64_t end = offset + n;
  ::madvise(map_ + begin, end - begin, MADV_DONTNEED);
  ::posix_fadvise(fd_, static_cast<off_t>(begin), static_cast<off_t>(end - begin), POSIX_FADV_DONTNEED);
}

void MappedFile::release(uint64_t offset, uint64_t n) const {
  if (!n || !map_) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  ::madvise(map_ + begin, offset + n - begin, MADV_DONTNEED);
}

void MappedFile::advise_sequential() const {
  if (map_) ::madvise(map_, size_, MADV_SEQUENTIAL);
}

}  // namespace tpshard
