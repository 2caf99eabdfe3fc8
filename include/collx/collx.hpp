/// @file collx.hpp
/// Umbrella header: every collective, the ops, and the in-process (threads) transport.
#pragma once

#include <collx/all_gather.hpp>
#include <collx/all_to_all.hpp>
#include <collx/allreduce.hpp>
#include <collx/barrier.hpp>
#include <collx/block_counts.hpp>
#include <collx/broadcast.hpp>
#include <collx/communicator.hpp>
#include <collx/concepts.hpp>
#include <collx/debug_log.hpp>
#include <collx/error.hpp>
#include <collx/hierarchy.hpp>
#include <collx/numeric.hpp>
#include <collx/ops.hpp>
#include <collx/rank_block.hpp>
#include <collx/reduce.hpp>
#include <collx/reduce_scatter.hpp>
#include <collx/send_recv.hpp>
#include <collx/split.hpp>
#include <collx/transport/threads.hpp>
#include <collx/version.hpp>
