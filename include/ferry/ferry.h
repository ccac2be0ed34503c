// The ferry C++ API in one include.
#pragma once

#include "ferry/directory.h"
#include "ferry/engine.h"
#include "ferry/log.h"
#include "ferry/memory.h"
#include "ferry/options.h"
#include "ferry/status.h"
#include "ferry/transfer.h"
#include "ferry/version.h"
