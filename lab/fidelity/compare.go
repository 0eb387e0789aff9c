package fidelity

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/headroomhq/headroom/lab/sim"
)

// HitAPE is the criterion of a hit: the prediction within 15% of the
// measurement, relative to it.
const HitAPE = 15

// Overload is the line past which a stage is overloaded, reported apart:
// any request failed, or the mean TTFT exceeded a minute.
const overloadTTFTMs = 60_000

// Row is one metric of one stage: predicted, measured, the signed error
// (predicted − measured) relative to the measurement and its absolute
// value (APE), both in percent, and whether it is a hit.
type Row struct {
	Run        string  `json:"run"`
	Stage      string  `json:"stage"`
	Metric     string  `json:"metric"`
	Predicted  float64 `json:"predicted"`
	Measured   float64 `json:"measured"`
	Signed     float64 `json:"-"`
	APE        float64 `json:"ape"`
	Hit        bool    `json:"hit"`
	Overloaded bool    `json:"overloaded"`
}

// Overloaded says a measured stage is overloaded.
func (s Stage) Overloaded() bool {
	return s.Failures > 0 || s.Values[TTFTMean] > overloadTTFTMs
}

// Compare compares a prediction with a run's measurement, stage by stage
// and metric by metric; overloaded stages (by the measurement) add their
// failures. An engine log adds its per-request comparison
// (TTFTPerRequest, E2EPerRequest).
func Compare(run string, pred, meas Measurement) ([]Row, error) {
	if len(pred.Stages) != len(meas.Stages) {
		return nil, fmt.Errorf("run %s: %d stages predicted, %d measured", run, len(pred.Stages), len(meas.Stages))
	}
	var rows []Row
	for k, ms := range meas.Stages {
		ps := pred.Stages[k]
		name := fmt.Sprintf("stage_%d", k)
		over := ms.Overloaded()
		for _, m := range Metrics {
			rows = append(rows, row(run, name, m, ps.Values[m], ms.Values[m], over))
		}
		if over || ps.Failures > 0 {
			rows = append(rows, row(run, name, Failures, float64(ps.Failures), float64(ms.Failures), over))
		}
	}
	if len(meas.Requests) > 0 {
		if len(pred.Requests) != len(meas.Requests) {
			return nil, fmt.Errorf("run %s: %d requests predicted, %d measured", run, len(pred.Requests), len(meas.Requests))
		}
		get := map[string]func(RequestTimes) float64{
			TTFTPerRequest: func(t RequestTimes) float64 { return t.TTFTMs },
			E2EPerRequest:  func(t RequestTimes) float64 { return t.E2EMs },
		}
		for _, m := range []string{TTFTPerRequest, E2EPerRequest} {
			var apes, p, q []float64
			for i, mt := range meas.Requests {
				a, b := get[m](pred.Requests[i]), get[m](mt)
				if math.IsNaN(a) || math.IsNaN(b) || b <= 0 {
					continue
				}
				apes, p, q = append(apes, 100*math.Abs(a-b)/b), append(p, a), append(q, b)
			}
			r := Row{Run: run, Stage: "requests", Metric: m, Predicted: quantile(p, 0.5), Measured: quantile(q, 0.5),
				APE: quantile(apes, 0.5)}
			r.Signed = 100 * (r.Predicted - r.Measured) / r.Measured
			r.Hit = r.APE <= HitAPE
			rows = append(rows, r)
		}
	}
	return rows, nil
}

func row(run, stage, metric string, pred, meas float64, over bool) Row {
	r := Row{Run: run, Stage: stage, Metric: metric, Predicted: pred, Measured: meas, Overloaded: over}
	switch {
	case math.IsNaN(pred) || math.IsNaN(meas):
		r.Signed, r.APE = math.NaN(), math.NaN()
	case meas == 0:
		r.Signed, r.APE = 0, 0
		if pred != 0 {
			r.Signed, r.APE = math.Inf(1), math.Inf(1)
		}
	default:
		r.Signed = 100 * (pred - meas) / meas
		r.APE = math.Abs(r.Signed)
	}
	if metric == Failures {
		// Within a factor of two, the overload target's criterion.
		r.Hit = pred >= meas/2 && pred <= 2*meas
	} else {
		r.Hit = r.APE <= HitAPE
	}
	return r
}

// Summary is one metric over the stages that were not overloaded: how
// many, the median APE and the share of hits.
type Summary struct {
	N         int     `json:"n"`
	MedianAPE float64 `json:"median_ape"`
	HitRate   float64 `json:"hit_rate"`
}

// Summarize summarises rows per stage metric, over the stages not
// overloaded.
func Summarize(rows []Row) map[string]Summary {
	out := make(map[string]Summary, len(Metrics))
	for _, m := range Metrics {
		var apes []float64
		hits := 0
		for _, r := range rows {
			if r.Metric != m || r.Overloaded || math.IsNaN(r.APE) {
				continue
			}
			apes = append(apes, r.APE)
			if r.Hit {
				hits++
			}
		}
		s := Summary{N: len(apes), MedianAPE: math.NaN(), HitRate: math.NaN()}
		if len(apes) > 0 {
			s.MedianAPE, s.HitRate = quantile(slices.Clone(apes), 0.5), float64(hits)/float64(len(apes))
		}
		out[m] = s
	}
	return out
}

// Evaluate predicts every run with coef and compares each with its
// measurement.
func Evaluate(ctx context.Context, runs []*Run, coef sim.Coefficients) (Report, error) {
	var rows []Row
	for _, r := range runs {
		pred, err := Predict(ctx, r.Spec, coef)
		if err != nil {
			return Report{}, fmt.Errorf("run %s: %w", r.Name, err)
		}
		rs, err := Compare(r.Name, pred, r.Measured)
		if err != nil {
			return Report{}, err
		}
		rows = append(rows, rs...)
	}
	return NewReport(rows), nil
}
