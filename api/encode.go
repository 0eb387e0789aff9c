package api

import (
	"math"
	"strconv"

	"github.com/headroomhq/headroom/predictor"
)

// The prediction responses are written by hand: they are the hot path's
// output, their shape is fixed, and appending into a pooled buffer costs a
// fraction of reflection-based encoding (see BenchmarkEncodeBulk).

// predictionMeta holds the fields every prediction object repeats.
type predictionMeta struct {
	predictedAt string // RFC 3339 with Z
	objective   string
	quantile    float64
	lastLoad    string
}

// appendBulkResponse writes a /predict/bulk[/strict] success body.
func appendBulkResponse(dst []byte, preds []predictor.Prediction, meta predictionMeta, processingMs float64) []byte {
	dst = append(dst, `{"predictions":[`...)
	for i := range preds {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendPrediction(dst, &preds[i], meta)
	}
	dst = append(dst, `],"total_requests":`...)
	dst = strconv.AppendInt(dst, int64(len(preds)), 10)
	dst = append(dst, `,"successful_predictions":`...)
	dst = strconv.AppendInt(dst, int64(len(preds)), 10)
	dst = append(dst, `,"failed_predictions":0,"processing_time_ms":`...)
	dst = appendFloat(dst, processingMs)
	return append(dst, '}')
}

// appendPrediction writes one prediction object.
func appendPrediction(dst []byte, p *predictor.Prediction, meta predictionMeta) []byte {
	dst = append(dst, `{"ttft_ms":`...)
	dst = appendFloat(dst, p.TTFTMs)
	dst = append(dst, `,"tpot_ms":`...)
	dst = appendFloat(dst, p.TPOTMs)
	dst = append(dst, `,"ttft_uncertainty":`...)
	dst = appendFloat(dst, p.TTFTUncertainty)
	dst = append(dst, `,"tpot_uncertainty":`...)
	dst = appendFloat(dst, p.TPOTUncertainty)
	dst = append(dst, `,"ttft_prediction_bounds":[`...)
	dst = appendFloat(dst, p.TTFTBounds[0])
	dst = append(dst, ',')
	dst = appendFloat(dst, p.TTFTBounds[1])
	dst = append(dst, `],"tpot_prediction_bounds":[`...)
	dst = appendFloat(dst, p.TPOTBounds[0])
	dst = append(dst, ',')
	dst = appendFloat(dst, p.TPOTBounds[1])
	dst = append(dst, `],"predicted_at":"`...)
	dst = append(dst, meta.predictedAt...)
	dst = append(dst, `","model_type":"`+modelTypeXGBoost+`","objective_type":"`...)
	dst = append(dst, meta.objective...)
	dst = append(dst, `","quantile":`...)
	dst = appendFloat(dst, meta.quantile)
	dst = append(dst, `,"last_model_load":"`...)
	dst = append(dst, meta.lastLoad...)
	return append(dst, `"}`...)
}

// appendFloat writes the shortest JSON number that reads back as v; a
// non-finite value, which the models never produce, is written as 0 rather
// than as invalid JSON.
func appendFloat(dst []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(dst, '0')
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}
