/// @file topo/smp_link.hpp
/// What the link between a machine's CPUs (QPI, UPI, Infinity Fabric, ...) reaches, from the CPU
/// model: part of the topology's hardware tables (topo/topology.hpp includes it), in a header of
/// its own because the host transports need it (topo/host_cost.hpp) and nothing else of the model.
#pragma once

#include <string_view>

namespace collx {
inline namespace v0 {
namespace topo {

/// What the CPU-to-CPU interconnect (QPI/UPI/Infinity Fabric/...) reaches for a collective, per
/// direction, GB/s, from the CPU's vendor and model: NCCL's figures in src/graph/topo.h
/// (BDW_QPI_BW 6 for Broadwell and older, SKL_QPI_BW 10 for Skylake to Ice Lake, SRP_QPI_BW 22 for
/// Sapphire Rapids, ERP_QPI_BW 40 for Emerald Rapids, AMD_BW 16, ARM_BW 6, P9_BW 32). Unknown
/// CPUs, Intel families other than 6 among them (NCCL gives those Broadwell's 6), get 10
/// (Skylake-class).
inline double smp_GBps(std::string_view vendor, int family, int model) noexcept {
  if (vendor == "GenuineIntel") {
    if (family == 6 && model >= 0xCF) return 40.0;   // Emerald Rapids
    if (family == 6 && model >= 0x8F) return 22.0;   // Sapphire Rapids
    if (family == 6 && model >= 0x55) return 10.0;   // Skylake-SP .. Ice Lake
    if (family == 6) return 6.0;                     // Broadwell and older (QPI)
    return 10.0;                                     // a family after 6: newer than any table row, so not Broadwell's
  }
  if (vendor == "AuthenticAMD" || vendor == "HygonGenuine") return 16.0;
  if (vendor == "ARM" || vendor.find("arm") != std::string_view::npos) return 6.0;
  if (vendor == "IBM" || vendor == "ppc64") return 32.0;
  return 10.0;
}

}  // namespace topo
}  // namespace v0
}  // namespace collx
