// The SIMD committee lanes (batch_integrators.hpp): the committee right-hand side, risk and divergence rule of one
// shape group in L lanes (batch_dynamics.hpp, batch_dynamics_bias.hpp, batch_dynamics_trig.hpp) as a System of the
// one integrator driver (lane_driver.hpp), which runs them one system at a time (L = 1) or a batch block at a time
// (L = kBatchLanes). Compiled with
// -ffp-contract=off (CMakeLists.txt): every lane does the same IEEE operations whatever L is, which makes a batch
// member bitwise equal to its run alone.
#include "twolayer/batch_integrators.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "lane_driver.hpp"
#include "twolayer/batch_dynamics.hpp"
#include "twolayer/batch_dynamics_bias.hpp"
#include "twolayer/batch_dynamics_trig.hpp"

namespace twolayer {

namespace {

// The committee right-hand side of one shape group in L SIMD lanes (batch_dynamics.hpp), as a System of the driver
// (lane_driver.hpp).
template <int L>
class CommitteeLanes {
 public:
  static constexpr int kLanes = L;
  CommitteeLanes(const LaneShape& shape, Activation act)
      : sh_(shape), act_(act), M_(shape.M), n_(shape.state_size()) {
    ws_.resize(committee_rhs_lanes_workspace(shape, L, act));
    chol_.resize(omega_check_lanes_workspace(shape, L));
    P_.resize(static_cast<std::size_t>(M_) * M_ * L);
    v_.resize(static_cast<std::size_t>(M_) * L);
    lr_.resize(L);
    lra_.resize(L);
    noise_.resize(L);
  }
  std::size_t state_size() const { return n_; }
  void load(int l, const OdeModel& m) {
    model_[l] = &m;
    for (int e = 0; e < M_ * M_; ++e) P_[e * L + l] = m.P[e];
    for (int e = 0; e < M_; ++e) v_[e * L + l] = m.v[e];
    lr_[l] = m.lr;
    lra_[l] = m.lr_readout;
    noise_[l] = sh_.online ? m.noise : 0.0;
  }
  // Never called: the lanes take no schedules (lanes_supported).
  void set_rate(int, double) { throw std::logic_error("the committee lanes take no learning-rate schedule"); }
  void rhs(const double* y, double* dy) {
    const LaneParams p{P_.data(), v_.data(), lr_.data(), lra_.data(), noise_.data()};
    rhs_fn_(sh_, p, y, dy, ws_.data());
  }
  // committee_risk_lanes with one lane: the arithmetic of every lane of risk_all (so that a row's risk is the same
  // whichever of the two computed it).
  double risk(int l, const double* x) const {
    double r;
    risk1_fn_(sh_, model_[l]->P.data(), model_[l]->v.data(), x, &r);
    return r;
  }
  void risk_all(const double* y, double* r) const { risk_fn_(sh_, P_.data(), v_.data(), y, r); }
  // The divergence rule over the lanes (omega_check_lanes in batch_dynamics.hpp).
  void check(const double* y, const double* bound, int* code) {
    check_fn_(sh_, P_.data(), y, bound, chol_.data(), code);
  }

 private:
  LaneShape sh_;
  Activation act_;  // of the student and teacher units alike
  CommitteeRhsLanesFn rhs_fn_ = select_committee_rhs_lanes<L>(act_, sh_.K, sh_.M);
  OmegaCheckLanesFn check_fn_ = select_omega_check_lanes<L>(sh_.K, sh_.M);
  CommitteeRiskLanesFn risk_fn_ = select_committee_risk_lanes<L>(act_, sh_.K, sh_.M),
                       risk1_fn_ = select_committee_risk_lanes<1>(act_, sh_.K, sh_.M);
  int M_;
  std::size_t n_;
  const OdeModel* model_[L] = {};
  std::vector<double> ws_, chol_, P_, v_, lr_, lra_, noise_;
};

// Rules 1 and 2 of the divergence rule (not finite, grown past the bound) on the entries [begin, end) of L lanes'
// states (the student biases after the order parameters), for lanes still ok.
template <int L>
void check_bias_lanes(std::size_t begin, std::size_t end, const double* y, const double* bound, int* code) {
  for (int l = 0; l < L; ++l)
    for (std::size_t e = begin; e < end && code[l] == kStateOk; ++e) {
      const double x = y[e * L + l];
      code[l] = !std::isfinite(x) ? kNotFinite : std::fabs(x) > bound[l] ? kGrew : kStateOk;
    }
}

// The erf committee with biases in L lanes (batch_dynamics_bias.hpp), as a System of the driver: the state gains the
// student biases, the divergence rule its rules 1 and 2 on them (as integrators.cpp's OneSystem).
template <int L>
class ErfBiasLanes {
 public:
  static constexpr int kLanes = L;
  explicit ErfBiasLanes(const LaneShape& shape) : sh_(shape), M_(shape.M), n_(shape.state_size() + shape.K) {
    chol_.resize(omega_check_lanes_workspace(shape, L));
    P_.resize(static_cast<std::size_t>(M_) * M_ * L);
    v_.resize(static_cast<std::size_t>(M_) * L);
    tb_.resize(static_cast<std::size_t>(M_) * L);
    for (auto* x : {&lr_, &lra_, &lrb_, &noise_, &rtt_}) x->resize(L);
  }
  std::size_t state_size() const { return n_; }
  void load(int l, const OdeModel& m) {
    model_[l] = &m;
    for (int e = 0; e < M_ * M_; ++e) P_[e * L + l] = m.P[e];
    for (int e = 0; e < M_; ++e) v_[e * L + l] = m.v[e], tb_[e * L + l] = m.teacher_bias[e];
    lr_[l] = m.lr;
    lra_[l] = m.lr_readout;
    lrb_[l] = m.lr_bias;
    noise_[l] = sh_.online ? m.noise : 0.0;
    rtt_[l] = teacher_risk_with_means(m);
  }
  void set_rate(int, double) { throw std::logic_error("the committee lanes take no learning-rate schedule"); }
  void rhs(const double* y, double* dy) {
    const LaneParams p{P_.data(), v_.data(), lr_.data(), lra_.data(), noise_.data()};
    erf_bias_rhs_lanes<L>(sh_, p, LaneBiasParams{tb_.data(), lrb_.data()}, y, dy);
  }
  double risk(int l, const double* x) const {
    const OdeModel& m = *model_[l];
    double r;
    erf_bias_risk_lanes<1>(sh_, m.P.data(), m.v.data(), m.teacher_bias.data(), &rtt_[l], x, &r);
    return r;
  }
  void risk_all(const double* y, double* r) const {
    erf_bias_risk_lanes<L>(sh_, P_.data(), v_.data(), tb_.data(), rtt_.data(), y, r);
  }
  void check(const double* y, const double* bound, int* code) {
    check_fn_(sh_, P_.data(), y, bound, chol_.data(), code);
    check_bias_lanes<L>(sh_.state_size(), n_, y, bound, code);
  }

 private:
  LaneShape sh_;
  OmegaCheckLanesFn check_fn_ = select_omega_check_lanes<L>(sh_.K, sh_.M);
  int M_;
  std::size_t n_;
  const OdeModel* model_[L] = {};
  std::vector<double> chol_, P_, v_, tb_, lr_, lra_, lrb_, noise_, rtt_;
};

// Sin or cos committees (student and teacher each sin or cos), with or without biases, in L lanes
// (batch_dynamics_trig.hpp), as a System of the driver: with biases the state gains the student biases and the
// divergence rule its rules 1 and 2 on them (as ErfBiasLanes).
template <int L>
class TrigLanes {
 public:
  static constexpr int kLanes = L;
  TrigLanes(const LaneShape& shape, Activation student, Activation teacher, bool biased)
      : sh_(shape),
        student_(student),
        teacher_(teacher),
        biased_(biased),
        M_(shape.M),
        n_(shape.state_size() + (biased ? shape.K : 0)) {
    chol_.resize(omega_check_lanes_workspace(shape, L));
    P_.resize(static_cast<std::size_t>(M_) * M_ * L);
    v_.resize(static_cast<std::size_t>(M_) * L);
    tb_.resize(static_cast<std::size_t>(M_) * L);
    for (auto* x : {&lr_, &lra_, &lrb_, &noise_}) x->resize(L);
  }
  std::size_t state_size() const { return n_; }
  void load(int l, const OdeModel& m) {
    model_[l] = &m;
    for (int e = 0; e < M_ * M_; ++e) P_[e * L + l] = m.P[e];
    for (int e = 0; e < M_; ++e) v_[e * L + l] = m.v[e], tb_[e * L + l] = biased_ ? m.teacher_bias[e] : 0.0;
    lr_[l] = m.lr;
    lra_[l] = m.lr_readout;
    lrb_[l] = biased_ ? m.lr_bias : 0.0;
    noise_[l] = sh_.online ? m.noise : 0.0;
  }
  void set_rate(int, double) { throw std::logic_error("the committee lanes take no learning-rate schedule"); }
  void rhs(const double* y, double* dy) {
    const LaneParams p{P_.data(), v_.data(), lr_.data(), lra_.data(), noise_.data()};
    const LaneBiasParams pb{biased_ ? tb_.data() : nullptr, biased_ ? lrb_.data() : nullptr};
    trig_rhs_lanes<L>(sh_, student_, teacher_, p, pb, y, dy);
  }
  // trig_risk_lanes with one lane: the arithmetic of every lane of risk_all.
  double risk(int l, const double* x) const {
    const OdeModel& m = *model_[l];
    double r;
    risk_fn<1>(m.P.data(), m.v.data(), biased_ ? m.teacher_bias.data() : nullptr, x, &r);
    return r;
  }
  void risk_all(const double* y, double* r) const {
    risk_fn<L>(P_.data(), v_.data(), biased_ ? tb_.data() : nullptr, y, r);
  }
  void check(const double* y, const double* bound, int* code) {
    check_fn_(sh_, P_.data(), y, bound, chol_.data(), code);
    check_bias_lanes<L>(sh_.state_size(), n_, y, bound, code);
  }

 private:
  template <int N>
  void risk_fn(const double* P, const double* v, const double* tb, const double* y, double* r) const {
    trig_risk_lanes<N>(sh_, student_, teacher_, P, v, tb, y, r);
  }
  LaneShape sh_;
  Activation student_, teacher_;
  bool biased_;
  OmegaCheckLanesFn check_fn_ = select_omega_check_lanes<L>(sh_.K, sh_.M);
  int M_;
  std::size_t n_;
  const OdeModel* model_[L] = {};
  std::vector<double> chol_, P_, v_, tb_, lr_, lra_, lrb_, noise_;
};

// The lanes' shape of a model; with the options of a run, the adaptive method's tolerances for the divergence rule.
LaneShape shape_of(const OdeModel& m, const IntegrateOptions* opt = nullptr) {
  LaneShape s;
  s.K = m.K;
  s.M = m.M;
  s.online = m.regime == Regime::Online;
  s.spherical = m.spherical;
  if (opt) s.psd_rtol = opt->psd_rtol(), s.psd_atol = opt->psd_atol();
  return s;
}

// rhs_lanes through a System (erf committees with biases, sin and cos committees): its rhs and risk_all on the
// members, L at a time.
template <int L, class System>
void system_rhs_lanes(System lanes, const std::vector<OdeModel>& models, const double* y, double* dy, double* risk) {
  const std::size_t n = lanes.state_size(), B = models.size();
  std::vector<double> ys(n * L), dys(n * L);
  for (std::size_t b0 = 0; b0 < B; b0 += L) {
    for (int l = 0; l < L; ++l) {
      const std::size_t b = std::min(b0 + l, B - 1);
      lanes.load(l, models[b]);
      for (std::size_t e = 0; e < n; ++e) ys[e * L + l] = y[b * n + e];
    }
    lanes.rhs(ys.data(), dys.data());
    double r[L];
    lanes.risk_all(ys.data(), r);
    for (int l = 0; l < L && b0 + l < B; ++l) {
      for (std::size_t e = 0; e < n; ++e) dy[(b0 + l) * n + e] = dys[e * L + l];
      risk[b0 + l] = r[l];
    }
  }
}

template <int L>
void rhs_lanes_impl(const std::vector<OdeModel>& models, const double* y, double* dy, double* risk) {
  const OdeModel& m0 = models[0];
  if (trig_lanes_activation(m0.student))
    return system_rhs_lanes<L>(TrigLanes<L>(shape_of(m0), m0.student, m0.teacher, m0.biased), models, y, dy, risk);
  if (m0.biased) return system_rhs_lanes<L>(ErfBiasLanes<L>(shape_of(m0)), models, y, dy, risk);
  const LaneShape sh = shape_of(m0);
  const int K = m0.K, M = m0.M;
  const std::size_t n = sh.state_size(), B = models.size(), mm = static_cast<std::size_t>(M) * M;
  const CommitteeRhsLanesFn rhs = select_committee_rhs_lanes<L>(m0.student, K, M);
  const CommitteeRiskLanesFn rsk = select_committee_risk_lanes<L>(m0.student, K, M);
  std::vector<double> ys(n * L), dys(n * L), ws(committee_rhs_lanes_workspace(sh, L, m0.student)), P(mm * L),
      v(static_cast<std::size_t>(M) * L), lr(L), lra(L), noise(L);
  for (std::size_t b0 = 0; b0 < B; b0 += L) {
    for (int l = 0; l < L; ++l) {
      const std::size_t b = std::min(b0 + l, B - 1);
      const OdeModel& m = models[b];
      for (std::size_t e = 0; e < n; ++e) ys[e * L + l] = y[b * n + e];
      for (std::size_t e = 0; e < mm; ++e) P[e * L + l] = m.P[e];
      for (int e = 0; e < M; ++e) v[e * L + l] = m.v[e];
      lr[l] = m.lr;
      lra[l] = m.lr_readout;
      noise[l] = sh.online ? m.noise : 0.0;
    }
    const LaneParams p{P.data(), v.data(), lr.data(), lra.data(), noise.data()};
    rhs(sh, p, ys.data(), dys.data(), ws.data());
    double r[L];
    rsk(sh, P.data(), v.data(), ys.data(), r);
    for (int l = 0; l < L && b0 + l < B; ++l) {
      for (std::size_t e = 0; e < n; ++e) dy[(b0 + l) * n + e] = dys[e * L + l];
      risk[b0 + l] = r[l];
    }
  }
}

}  // namespace

void rhs_lanes(const std::vector<OdeModel>& models, const double* y, int lanes, double* dy, double* risk) {
  if (models.empty()) return;
  const OdeModel& m0 = models[0];
  for (const OdeModel& m : models) {
    validate_model(m);
    if (m.K != m0.K || m.M != m0.M || m.student != m0.student || m.teacher != m0.teacher ||
        m.regime != m0.regime || m.spherical != m0.spherical || m.biased != m0.biased)
      throw std::invalid_argument("models: expected one shape (K, M, activations, regime, spherical, biases) for all");
    if (m.biased && m.student != Activation::Erf && !trig_lanes_activation(m.student))
      throw std::invalid_argument("models: the lanes with biases cover erf, sin and cos committees");
    if ((m.teacher != m.student && !(trig_lanes_activation(m.student) && trig_lanes_activation(m.teacher))) ||
        m.target)
      throw std::invalid_argument("models: the lanes need one activation for student and teacher (or sin and cos) "
                                  "and no target");
  }
  if (!committee_lanes_activation(m0.student) && !trig_lanes_activation(m0.student))
    throw std::invalid_argument(std::string("act: the lanes cover erf, relu, quadratic, linear, sin and cos "
                                            "committees, got '") +
                                activation_name(m0.student) + "'");
  if (m0.K > kLaneMaxUnits || m0.M > kLaneMaxUnits)
    throw std::invalid_argument("K, M: the lanes hold at most " + std::to_string(kLaneMaxUnits) + " units each");
  if (lanes == 1) return rhs_lanes_impl<1>(models, y, dy, risk);
  if (lanes == kBatchLanes) return rhs_lanes_impl<kBatchLanes>(models, y, dy, risk);
  throw std::invalid_argument("lanes: expected 1 or " + std::to_string(kBatchLanes) + ", got " + std::to_string(lanes));
}

// The lanes hold the committee right-hand side of one activation for student and teacher at a constant learning rate,
// K, M <= kLaneMaxUnits: erf, quadratic and linear committees (measured at K = M = 2, 10^3 members: the quadratic lanes
// 10x faster than OdeRhs). Relu committees stay on the one-system path: their cost is the I4 path integral, the same
// per lane as in OdeRhs (the lanes measured no faster, within 5%); the GPU uses their lanes (committee_rhs_lanes). A
// polynomial target's terms (target.hpp) and a learning-rate schedule (schedule.hpp) run on the one-system path too.
// Erf committees with biases (fixed or trained) have lanes of their own (batch_dynamics_bias.hpp; measured at
// K = M = 2, 10^3 online members, RK4: 3.1x faster than OdeRhs with means, adaptive 2.4x); linear and quadratic ones
// with biases stay on the one-system path. Sin and cos committees (student and teacher each sin or cos), with or
// without biases, have lanes of their own (batch_dynamics_trig.hpp: closed forms; measured at K = M = 2 and 4, 256
// members, adaptive to t = 10, one thread: 4-8x faster per member than OdeRhs in gradient flow, 4x online at
// K = M = 4 (closed-form I4 on both paths), and 30-1200x where OdeRhs takes quadratures: the online term by its
// lattice at K + M <= 4, and with biases pair_moment's adaptive rule in the risk, 1.6 ms per recorded row). The
// lattice-based activations stay on the one-system path (batch_integrators.hpp).
bool lanes_supported(const OdeModel& m, const IntegrateOptions& opt) {
  const bool committee = committee_lanes_activation(m.student) && m.student != Activation::Relu &&
                         (!m.biased || m.student == Activation::Erf);
  const bool trig = trig_lanes_activation(m.student) && trig_lanes_activation(m.teacher);
  return ((committee && m.student == m.teacher) || trig) && m.K <= kLaneMaxUnits && m.M <= kLaneMaxUnits &&
         !m.target && opt.schedule.identity();
}

IntegrateResult integrate_lanes(const OdeModel& model, const double* y0, const IntegrateOptions& opt,
                                const StopRule& stop) {
  validate_model(model);
  IntegrateResult res;
  const OdeModel* m = &model;
  const StopRule* s = &stop;
  IntegrateResult* r = &res;
  if (trig_lanes_activation(model.student)) {
    TrigLanes<1> lanes(shape_of(model, &opt), model.student, model.teacher, model.biased);
    LaneDriver<TrigLanes<1>> driver(lanes, opt);
    driver.run(&m, &y0, &s, 1, &r);
  } else if (model.biased) {
    ErfBiasLanes<1> lanes(shape_of(model, &opt));
    LaneDriver<ErfBiasLanes<1>> driver(lanes, opt);
    driver.run(&m, &y0, &s, 1, &r);
  } else {
    CommitteeLanes<1> lanes(shape_of(model, &opt), model.student);
    LaneDriver<CommitteeLanes<1>> driver(lanes, opt);
    driver.run(&m, &y0, &s, 1, &r);
  }
  return res;
}

void integrate_lane_block(const OdeModel* const* models, const double* const* y0s, const StopRule* const* stops,
                          int count, const IntegrateOptions& opt, IntegrateResult* const* out, RowSink* sink,
                          const std::size_t* members) {
  if (trig_lanes_activation(models[0]->student)) {
    TrigLanes<kBatchLanes> lanes(shape_of(*models[0], &opt), models[0]->student, models[0]->teacher,
                                   models[0]->biased);
    LaneDriver<TrigLanes<kBatchLanes>> driver(lanes, opt);
    driver.run(models, y0s, stops, count, out, sink, members);
    return;
  }
  if (models[0]->biased) {
    ErfBiasLanes<kBatchLanes> lanes(shape_of(*models[0], &opt));
    LaneDriver<ErfBiasLanes<kBatchLanes>> driver(lanes, opt);
    driver.run(models, y0s, stops, count, out, sink, members);
    return;
  }
  CommitteeLanes<kBatchLanes> lanes(shape_of(*models[0], &opt), models[0]->student);
  LaneDriver<CommitteeLanes<kBatchLanes>> driver(lanes, opt);
  driver.run(models, y0s, stops, count, out, sink, members);
}

}  // namespace twolayer
