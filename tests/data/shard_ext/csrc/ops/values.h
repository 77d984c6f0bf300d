// Constants of the ops kernels: a header inside the source tree, so a compile shard's record lists
// it among the files its TU was compiled from.
#pragma once
#define SHARD_EXT_FILL_VALUE 0.5f
