// The Rust half's per-rank reader (caffe-plugin/src/reader_ffi.rs): one
// rank's share of a database, record by record: a contiguous block, or with
// `strided` nonzero record t of the endless stream of epochs for t = rank
// (mod ranks) (caffe-plugin/src/partition_reader.rs). Functions return
// 0 on success and nonzero with lmdbio_caffe_last_error() set otherwise.
// A reader is used by one thread at a time. Key and value pointers stay
// valid until the reader moves or is freed.
#ifndef LMDBIO_CAFFE_PARTITION_READER_H
#define LMDBIO_CAFFE_PARTITION_READER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lmdbio_caffe_reader lmdbio_caffe_reader;

const char* lmdbio_caffe_last_error(void);
int lmdbio_caffe_reader_open(const char* path, uint64_t rank, uint64_t ranks, int strided,
                             lmdbio_caffe_reader** out);
void lmdbio_caffe_reader_free(lmdbio_caffe_reader* reader);
// The share of the current epoch: records first, first + stride, ... (count
// of them). Any out pointer may be NULL.
int lmdbio_caffe_reader_share(lmdbio_caffe_reader* reader, uint64_t* out_records,
                              uint64_t* out_first, uint64_t* out_count, uint64_t* out_stride);
int lmdbio_caffe_reader_valid(lmdbio_caffe_reader* reader);
// Valid: back to the first record. Past the end: the next epoch's first.
int lmdbio_caffe_reader_seek_to_first(lmdbio_caffe_reader* reader);
int lmdbio_caffe_reader_next(lmdbio_caffe_reader* reader);
int lmdbio_caffe_reader_ordinal(lmdbio_caffe_reader* reader, uint64_t* out);
int lmdbio_caffe_reader_key(lmdbio_caffe_reader* reader, const void** out, size_t* out_len);
int lmdbio_caffe_reader_value(lmdbio_caffe_reader* reader, const void** out, size_t* out_len);

#ifdef __cplusplus
}
#endif
#endif
