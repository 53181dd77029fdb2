// libcaffe's own definition of a function this library also exports under
// the same (mangled) name: the next one after this library in lookup order.
#ifndef LMDBIO_CAFFE_REAL_FUNCTION_HPP
#define LMDBIO_CAFFE_REAL_FUNCTION_HPP

#include <dlfcn.h>

#include <glog/logging.h>

namespace lmdbio_caffe {

template <typename F>
F real_function(const char* mangled, const char* readable) {
  void* f = dlsym(RTLD_NEXT, mangled);
  CHECK(f != nullptr) << "libcaffe_lmdbio: cannot find libcaffe's " << readable << ": "
                      << dlerror();
  return reinterpret_cast<F>(f);
}

}  // namespace lmdbio_caffe

#endif
