#include "key_log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include <glog/logging.h>

#include "mpi_session.hpp"

namespace lmdbio_caffe {
namespace {

const char* key_log_dir() { return std::getenv("LMDBIO_CAFFE_KEY_LOG"); }

std::mutex log_mutex;
std::FILE* log_file = nullptr;

}  // namespace

bool key_log_enabled() {
  const char* dir = key_log_dir();
  return dir != nullptr && *dir != '\0';
}

void log_key(const void* key, std::size_t len) {
  if (!key_log_enabled()) return;
  std::lock_guard<std::mutex> lock(log_mutex);
  if (log_file == nullptr) {
    int rank = 0, size = 1;
    world_rank_size(&rank, &size);
    const std::string path = std::string(key_log_dir()) + "/rank-" + std::to_string(rank) + ".keys";
    log_file = std::fopen(path.c_str(), "a");
    CHECK(log_file != nullptr) << "LMDBIO_CAFFE_KEY_LOG: cannot open " << path;
  }
  static const char digits[] = "0123456789abcdef";
  const unsigned char* bytes = static_cast<const unsigned char*>(key);
  std::string line;
  line.reserve(2 * len + 1);
  for (std::size_t i = 0; i < len; i++) {
    line.push_back(digits[bytes[i] >> 4]);
    line.push_back(digits[bytes[i] & 15]);
  }
  line.push_back('\n');
  // Flushed per key: a run that aborts still leaves what it delivered.
  std::fwrite(line.data(), 1, line.size(), log_file);
  std::fflush(log_file);
}

}  // namespace lmdbio_caffe
