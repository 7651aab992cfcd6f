/* trident — the whole public API of libtrident. */
#ifndef TRIDENT_TRIDENT_H
#define TRIDENT_TRIDENT_H
#include "trident/status.h"
#include "trident/dtype.h"
#include "trident/tensor.h"
#include "trident/ops.h"
#include "trident/graph.h"
#include "trident/config.h"
#include "trident/model.h"
#include "trident/weights.h"
#include "trident/safetensors.h"
#include "trident/backend.h"
#include "trident/loader.h"
#include "trident/bench.h"
#include "trident/report.h"
#include "trident/check_nodes.h"
#include "trident/log.h"
#include "trident/rng.h"
#include "trident/autodiff.h"
#include "trident/optim.h"
#endif
