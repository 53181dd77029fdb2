// Zero-change mode: `caffe::db::GetDB` (exported from the Rust half under
// its C++ names, see src/caffe_symbols.rs) returns an lmdbio-backed DB for
// LMDB. Reading goes through the per-rank partition reader; writing (as in
// convert_imageset) and LevelDB go to libcaffe's own implementation, as does
// everything when LMDBIO_CAFFE_DISABLE is set.
//
// Under data-parallel training (cpp/data_parallel.cpp) the share is
// Caffe's stride over the stream of epochs, otherwise a contiguous block.
//
// The stock Data layer drives the cursor from its prefetch thread, which
// runs ahead and is interrupted at shutdown at a point no other rank can
// predict; so nothing here is collective: each rank reads its own share.

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include <glog/logging.h>

#include "caffe/proto/caffe.pb.h"
#include "caffe/util/db.hpp"
#include "key_log.hpp"
#include "mpi_session.hpp"
#include "partition_reader.h"
#include "real_function.hpp"

namespace lmdbio_caffe {
namespace {

using caffe::DataParameter_DB;
using caffe::db::Cursor;
using caffe::db::DB;
using caffe::db::Transaction;

typedef DB* (*GetDbByBackend)(DataParameter_DB);
typedef DB* (*GetDbByName)(const std::string&);

DB* real_get_db(DataParameter_DB backend) {
  static const GetDbByBackend f = real_function<GetDbByBackend>(
      "_ZN5caffe2db5GetDBENS_16DataParameter_DBE", "caffe::db::GetDB(DataParameter_DB)");
  return f(backend);
}

DB* real_get_db(const std::string& backend) {
  static const GetDbByName f = real_function<GetDbByName>(
      "_ZN5caffe2db5GetDBERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
      "caffe::db::GetDB(const std::string&)");
  return f(backend);
}

bool disabled() {
  const char* v = std::getenv("LMDBIO_CAFFE_DISABLE");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Owns a reader; opening fails the run through glog with the path and reason.
struct ReaderHandle {
  lmdbio_caffe_reader* reader = nullptr;
  ~ReaderHandle() { lmdbio_caffe_reader_free(reader); }
};

std::unique_ptr<ReaderHandle> open_share(const std::string& source) {
  ensure_mpi(false);
  int rank = 0, ranks = 1;
  world_rank_size(&rank, &ranks);
  // Data-parallel: the ranks' batches together are one process's batch
  // of P times the size (cpp/data_parallel.cpp).
  const bool strided = data_parallel_enabled();
  std::unique_ptr<ReaderHandle> handle(new ReaderHandle);
  if (lmdbio_caffe_reader_open(source.c_str(), rank, ranks, strided ? 1 : 0, &handle->reader) != 0) {
    LOG(FATAL) << "lmdbio: cannot read LMDB " << source << ": " << lmdbio_caffe_last_error();
  }
  uint64_t records = 0, first = 0, count = 0;
  CHECK_EQ(lmdbio_caffe_reader_share(handle->reader, &records, &first, &count, nullptr), 0);
  if (strided) {
    LOG(INFO) << "lmdbio: reading " << source << " (rank " << rank << " of " << ranks
              << ": every " << ranks << "th record from record " << rank << " of " << records
              << ", data-parallel)";
  } else {
    LOG(INFO) << "lmdbio: reading " << source << " (rank " << rank << " of " << ranks
              << ": records " << first << ".." << first + count << " of " << records << ")";
  }
  return handle;
}

class PartitionCursor : public Cursor {
 public:
  PartitionCursor(std::unique_ptr<ReaderHandle> handle, std::string source)
      : handle_(std::move(handle)), source_(std::move(source)) {}

  void SeekToFirst() override { check(lmdbio_caffe_reader_seek_to_first(handle_->reader), "seek"); }
  void Next() override { check(lmdbio_caffe_reader_next(handle_->reader), "advance"); }
  bool valid() override { return lmdbio_caffe_reader_valid(handle_->reader) != 0; }

  std::string key() override {
    const void* p = nullptr;
    size_t len = 0;
    check(lmdbio_caffe_reader_key(handle_->reader, &p, &len), "read the key");
    return std::string(static_cast<const char*>(p), len);
  }

  std::string value() override {
    const void* p = nullptr;
    size_t len = 0;
    check(lmdbio_caffe_reader_value(handle_->reader, &p, &len), "read a value");
    if (key_log_enabled()) {
      const void* k = nullptr;
      size_t klen = 0;
      check(lmdbio_caffe_reader_key(handle_->reader, &k, &klen), "read the key");
      log_key(k, klen);
    }
    return std::string(static_cast<const char*>(p), len);
  }

 private:
  void check(int rc, const char* what) {
    if (rc != 0) {
      LOG(FATAL) << "lmdbio: cannot " << what << " in " << source_ << ": "
                 << lmdbio_caffe_last_error();
    }
  }

  std::unique_ptr<ReaderHandle> handle_;
  std::string source_;
};

class LmdbioDB : public DB {
 public:
  explicit LmdbioDB(std::function<DB*()> make_real) : make_real_(std::move(make_real)) {}

  void Open(const std::string& source, caffe::db::Mode mode) override {
    if (mode != caffe::db::READ) {
      real_.reset(make_real_());
      real_->Open(source, mode);
      return;
    }
    source_ = source;
    // Opened here so a bad path fails where liblmdb's would; the first
    // cursor takes this reader, later ones open their own.
    first_reader_ = open_share(source);
  }

  void Close() override {
    if (real_) real_->Close();
    first_reader_.reset();
  }

  Cursor* NewCursor() override {
    if (real_) return real_->NewCursor();
    CHECK(!source_.empty()) << "lmdbio: NewCursor before Open";
    std::unique_ptr<ReaderHandle> reader =
        first_reader_ ? std::move(first_reader_) : open_share(source_);
    return new PartitionCursor(std::move(reader), source_);
  }

  Transaction* NewTransaction() override {
    CHECK(real_) << "lmdbio: " << source_ << " was opened for reading";
    return real_->NewTransaction();
  }

 private:
  std::function<DB*()> make_real_;
  std::unique_ptr<DB> real_;
  std::string source_;
  std::unique_ptr<ReaderHandle> first_reader_;
};

}  // namespace
}  // namespace lmdbio_caffe

// Called by the exported GetDB overloads (src/caffe_symbols.rs).
extern "C" caffe::db::DB* lmdbio_caffe_get_db_by_backend(int backend) {
  using namespace lmdbio_caffe;
  const DataParameter_DB db = static_cast<DataParameter_DB>(backend);
  if (disabled() || db != caffe::DataParameter_DB_LMDB) return real_get_db(db);
  return new LmdbioDB([] { return real_get_db(caffe::DataParameter_DB_LMDB); });
}

extern "C" caffe::db::DB* lmdbio_caffe_get_db_by_name(const std::string* backend) {
  using namespace lmdbio_caffe;
  if (disabled() || *backend != "lmdb") return real_get_db(*backend);
  return new LmdbioDB([] { return real_get_db(std::string("lmdb")); });
}
