// The status the kernels fail with on bad input: InvalidArgument with a message built from pieces
// (TF's errors::InvalidArgument is deprecated in favour of absl's).
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace xdl_ec::tf_ops {

template <typename... Args>
absl::Status InvalidArgument(Args&&... args) {
  return absl::InvalidArgumentError(absl::StrCat(std::forward<Args>(args)...));
}

}  // namespace xdl_ec::tf_ops
