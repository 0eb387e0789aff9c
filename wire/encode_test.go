package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Encoding in parallel shares gives the same bytes as one pass, and the
// bytes are JSON that reads back to the exact predictions.
func TestAppendBulkResponse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 8, 10, 12, 0, 0, 500000000, time.UTC)
	meta := PredictionMeta{PredictedAt: AppendTimestamp(nil, now), Objective: "quantile",
		Quantile: AppendFloat(nil, 0.9), LastLoad: Timestamp(now.Add(-time.Minute))}
	for _, n := range []int{1, 2*parallelEncodeRows - 1, 2 * parallelEncodeRows, 3*parallelEncodeRows + 5, 10000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			preds := make([]Prediction, n)
			for i := range preds {
				v := math.Exp(r.NormFloat64() * 3)
				preds[i] = Prediction{TTFTMs: v, TPOTMs: v / 7, TTFTBounds: [2]float64{v / 2, v * 2},
					TPOTBounds: [2]float64{v / 14, v / 3}, TTFTUncertainty: 0.3, TPOTUncertainty: r.Float64()}
			}
			got := AppendBulkResponse(nil, preds, &meta, 1.25)
			want := append(appendPredictionList([]byte(`{"predictions":[`), preds, &meta),
				fmt.Sprintf(`],"total_requests":%d,"successful_predictions":%d,"failed_predictions":0,"processing_time_ms":1.25}`, n, n)...)
			if string(got) != string(want) {
				t.Fatalf("parallel encoding differs from sequential (%d vs %d bytes)", len(got), len(want))
			}
			var doc struct {
				Predictions []struct {
					TTFT     float64    `json:"ttft_ms"`
					TPOT     float64    `json:"tpot_ms"`
					Bounds   [2]float64 `json:"ttft_prediction_bounds"`
					At       string     `json:"predicted_at"`
					Quantile float64    `json:"quantile"`
				} `json:"predictions"`
				Total int `json:"total_requests"`
			}
			if err := json.Unmarshal(got, &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Predictions) != n || doc.Total != n {
				t.Fatalf("%d predictions, total %d; want %d", len(doc.Predictions), doc.Total, n)
			}
			for i, p := range doc.Predictions {
				if p.TTFT != preds[i].TTFTMs || p.TPOT != preds[i].TPOTMs || p.Bounds != preds[i].TTFTBounds ||
					p.At != "2026-08-10T12:00:00.5Z" || p.Quantile != 0.9 {
					t.Fatalf("prediction %d reads back as %+v, want %+v", i, p, preds[i])
				}
			}
		})
	}
}
