// The LMDBIOData layer: a drop-in for Caffe's Data layer (same data_param
// and transform_param) that reads batches from lmdbio's collective engine
// and decodes and transforms them on a pool of worker threads.
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
  void next_engine_batch(lmdbio_batch* out);
  void parse_datum(const lmdbio_record& record, caffe::Datum* datum) const;

  std::string source_;
  lmdbio_engine* engine_;
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
