#pragma once
// The caching allocator lives in core/ (graph-mode workspaces and results use it too); this header stays for
// programs that include it by its old path.
#include "../core/allocator.hpp"
