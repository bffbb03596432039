// The structure-of-arrays integrators: members of one shape group (equal K, M, activations, regime, spherical, with
// or without biases) integrated L at a time in the SIMD lanes (batch_dynamics.hpp) by the one integrator driver
// (lane_driver.hpp), each lane with its own time, step size, stop rule and status, exactly as integrate() runs one
// system alone (integrate() itself runs supported systems here with one lane, so that a member's rows are bitwise the
// same in a batch and alone, whatever the other lanes and the thread count). Supported (lanes_supported): student and
// teacher of one activation, erf, quadratic or linear, erf also with biases (batch_dynamics_bias.hpp), sin or cos
// with or without biases (batch_dynamics_trig.hpp), K and M <= kLaneMaxUnits (any regime, spherical or not).
// Everything else runs through the same driver with OdeRhs as its one lane (integrators.cpp):
//   * larger systems, for which the one-system right-hand side (OdeRhs) already fills the SIMD lanes with the I4
//     terms of 4 unit pairs (and threads inside the right-hand side), so that lanes over members gain little in a
//     batch and a one-lane single run would be slower (measured: at K = M = 8 the lane batch was slower than members
//     one by one); relu committees (see lanes_supported);
//   * the activations whose Gaussian expectations are certified lattice quadratures (tanh, sigmoid, softplus, gelu,
//     silu, custom; gaussian_smooth.hpp, gaussian_error_square.hpp). Measured (K = M = 2, one core, perf): a member's
//     right-hand side is 40-230 us in gradient flow and 0.5-1.5 ms online (erf in lanes: 0.05-0.1 us), all of it
//     the lattices, whose node counts, line lengths and interpolation grids follow each member's own covariance.
//     Online (tanh 1.1 ms), 81% of the samples are the error-square lattice's line loops, already vectorised over
//     nodes (41% of all samples on packed AVX2 instructions; 17% scalar floating point: Lagrange weights, setup; 23%
//     integer, branch and memory work). Lanes over members would leave the packed share as it is and could at best
//     spread the rest over the lanes (1.15x for the scalar floating point 4-wide, ~2x if 8 members' lattices ran
//     in lockstep), but each member's steps, node counts, line lengths, grids, runs per grid cell and certificate
//     retries follow its own covariance: every lane padded to its block's largest lattice, the runs split lane by
//     lane. In gradient flow (tanh 99 us, softplus 36 us) 41-48% is libm (tanh, expm1, exp; softplus log1p, exp)
//     per lattice point and most of the rest the scalar point setup of smooth::moments (10-20% of it packed): that
//     share vectorises as well over the points of one member (as the online tables do with tanh_sech2_simd) as over
//     members, without padding and for a single run too. A batch of tanh, softplus or custom-tanh members costs per
//     member what one member alone costs (within 5%; docs/layers/ode.rst, "Batches in SIMD lanes").
#pragma once
#include <cstddef>
#include <vector>

#include "twolayer/integrators.hpp"

namespace twolayer {

// Whether the structure-of-arrays path integrates this model (and options): the models and options it does not
// take (other activations, relu committees, biases but with erf, sin and cos; targets; learning-rate schedules) go to
// the one-system path.
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
// erf_bias_risk_lanes for biased erf models, trig_rhs_lanes and trig_risk_lanes for sin and cos models; with biases
// dy has the biases' rows) of B models of one shape (K, M <= kLaneMaxUnits, all biased or none) whose student and
// teacher share one activation (erf, relu, quadratic, linear, sin or cos), evaluated `lanes`
// (1 or 8) members at a time, the last block padded by repeating its last member: dy (B x state_size) and risk (B).
// A diagnostic entry (the tests hold it against OdeRhs, and L = 1 against L = 8); throws std::invalid_argument for
// models it does not cover.
void rhs_lanes(const std::vector<OdeModel>& models, const double* y, int lanes, double* dy, double* risk);

}  // namespace twolayer
