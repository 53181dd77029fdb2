// The LMDBIOData layer: a drop-in for Caffe's Data layer (same data_param
// and transform_param) that reads batches from lmdbio's collective engine
// and decodes and transforms them on a pool of worker threads.
//
// One engine per process: MPICH's ROMIO holds a process-wide lock for the
// whole of a collective MPI-IO call (open, set_view, read_at_all, close),
// so two engines doing I/O from two threads (Caffe's TRAIN and TEST
// prefetch threads) can each hold the lock on one rank while waiting for
// the other engine's call on another rank: a deadlock across ranks. The
// first LMDBIOData layer set up while no engine is open gets the engine
// (the same layer on every rank: layers are built in the same order); any
// other (typically the TEST net's) reads its rank's share with the per-rank
// reader of the zero-change mode, which uses no MPI.
#ifndef LMDBIO_CAFFE_DATA_LAYER_HPP
#define LMDBIO_CAFFE_DATA_LAYER_HPP

#include <memory>
#include <string>
#include <vector>

#include "caffe/blob.hpp"
#include "caffe/data_transformer.hpp"
#include "caffe/layers/base_data_layer.hpp"
#include "caffe/proto/caffe.pb.h"
#include "lmdbio.h"
#include "partition_reader.h"
#include "worker_pool.hpp"

namespace lmdbio_caffe {

template <typename Dtype>
class LmdbioDataLayer : public caffe::BasePrefetchingDataLayer<Dtype> {
 public:
  explicit LmdbioDataLayer(const caffe::LayerParameter& param);
  virtual ~LmdbioDataLayer();
  virtual void DataLayerSetUp(const std::vector<caffe::Blob<Dtype>*>& bottom,
                              const std::vector<caffe::Blob<Dtype>*>& top);
  virtual inline const char* type() const { return "LMDBIOData"; }
  virtual inline int ExactNumBottomBlobs() const { return 0; }
  virtual inline int MinTopBlobs() const { return 1; }
  virtual inline int MaxTopBlobs() const { return 2; }

 protected:
  virtual void InternalThreadEntry();
  virtual void load_batch(caffe::Batch<Dtype>* batch);

 private:
  void open_engine(int batch_size, int* rank, int* ranks, uint64_t* records);
  void open_share_reader(int* rank, int* ranks, uint64_t* records);
  // The next batch_size records, from whichever source this layer has;
  // valid until the next call.
  void next_batch(lmdbio_batch* out);
  void next_reader_batch(lmdbio_batch* out);
  void parse_datum(const lmdbio_record& record, caffe::Datum* datum) const;

  std::string source_;
  lmdbio_engine* engine_;
  // Without the engine: the per-rank reader and the batch's copies.
  lmdbio_caffe_reader* reader_;
  std::vector<std::string> reader_keys_;
  std::vector<std::string> reader_values_;
  std::vector<lmdbio_record> reader_records_;
  // The batch read during set-up for the shape; the first load_batch uses it.
  lmdbio_batch pending_;
  bool has_pending_;
  std::unique_ptr<WorkerPool> pool_;
  // One transformer and one item-sized view per worker.
  std::vector<std::unique_ptr<caffe::DataTransformer<Dtype> > > transformers_;
  std::vector<std::unique_ptr<caffe::Blob<Dtype> > > item_views_;
};

}  // namespace lmdbio_caffe

#endif
