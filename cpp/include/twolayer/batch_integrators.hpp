// The structure-of-arrays integrators: members of one shape group (equal K, M, activations, regime, spherical, with
// or without biases) integrated L at a time in the SIMD lanes (batch_dynamics.hpp) by the one integrator driver (lane_driver.hpp), each
// lane with its own time, step size, stop rule and status, exactly as integrate() runs one system alone (integrate()
// itself runs supported systems here with one lane, so that a member's rows are bitwise the same in a batch and
// alone, whatever the other lanes and the thread count). Supported: student and teacher of one activation, erf,
// quadratic or linear, erf also with biases (batch_dynamics_bias.hpp) (lanes_supported), K and M <= kLaneMaxUnits
// (any regime, spherical or not). Everything else
// runs through the same driver with OdeRhs as its one lane (integrators.cpp): other activations (relu committees too: see lanes_supported), and larger systems, for which the one-system
// right-hand side (OdeRhs) already fills the SIMD lanes with the I4 terms of 4 unit pairs (and threads inside the
// right-hand side), so that lanes over members gain little in a batch and a one-lane single run would be slower
// (measured: at K = M = 8 the lane batch was slower than members one by one).
#pragma once
#include <cstddef>
#include <vector>

#include "twolayer/integrators.hpp"

namespace twolayer {

// Whether the structure-of-arrays path integrates this model (and options): the models and options it does not
// take (other activations, relu committees, biases but with erf; targets; learning-rate schedules) go to the
// one-system path.
constexpr int kLaneMaxUnits = 4;
constexpr int kBatchLanes = 8;  // lanes per block in a batch (two AVX2 vectors; 16 lanes measured no faster)
bool lanes_supported(const OdeModel& m, const IntegrateOptions& opt);

// One supported system, one lane (validated options and rule).
IntegrateResult integrate_lanes(const OdeModel& model, const double* y0, const IntegrateOptions& opt,
                                const StopRule& stop);

// One block of count <= kBatchLanes supported members of one shape (lane l: models[l], y0s[l], stops[l], into
// out[l]; its rows into out[l] or, with a sink, to the sink as those of member members[l]). Inputs validated.
void integrate_lane_block(const OdeModel* const* models, const double* const* y0s, const StopRule* const* stops,
                          int count, const IntegrateOptions& opt, IntegrateResult* const* out, RowSink* sink,
                          const std::size_t* members);

// The lane right-hand side and risk (committee_rhs_lanes, committee_risk_lanes; erf_bias_rhs_lanes and
// erf_bias_risk_lanes for biased erf models, whose dy has the biases' rows) of B models of one shape (K, M <=
// kLaneMaxUnits, all biased or none) whose student and teacher share one activation (erf, relu, quadratic or
// linear), evaluated `lanes`
// (1 or 8) members at a time, the last block padded by repeating its last member: dy (B x state_size) and risk (B).
// A diagnostic entry (the tests hold it against OdeRhs, and L = 1 against L = 8); throws std::invalid_argument for
// models it does not cover.
void rhs_lanes(const std::vector<OdeModel>& models, const double* y, int lanes, double* dy, double* risk);

}  // namespace twolayer
