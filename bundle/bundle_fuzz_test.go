package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
)

// The bundle reader is where a predictor meets bytes from the network. The
// fuzz targets hold it to what a predictor relies on: Decode never panics,
// and whatever it accepts predicts finite numbers within the model's
// clamps for any row, dumps its trees, and survives re-encoding unchanged.
// Committed seeds are in testdata/fuzz; scripts/test.sh runs each target
// briefly, HEADROOM_LONG_TESTS=1 longer.

var fuzzKey = []byte("fuzz-signing-key-0123456789")

// fuzzRows are the rows every accepted bundle must predict: ordinary,
// empty, and extreme.
var fuzzRows = []features.Row{
	{},
	{KVCachePercentage: 0.3, InputTokenLength: 963, NumRequestWaiting: 5, NumRequestRunning: 2, PrefixCacheScore: 0.65,
		PrefillTokensInFlight: 4809, PodType: "decode"},
	{KVCachePercentage: 1, InputTokenLength: 1e8, NumRequestWaiting: 1e8, NumRequestRunning: 1e8, PrefixCacheScore: 1,
		PrefillTokensInFlight: 1e8, DecodeTokensInFlight: 1e8, EncoderInputSize: 1e8, EncoderMatchedSize: 1e8, PodType: "prefill"},
	{InputTokenLength: math.MaxInt64, NumRequestRunning: math.MaxInt64, PrefillTokensInFlight: math.MaxInt64},
}

// checkAccepted asserts what a predictor needs of a bundle Decode accepted.
func checkAccepted(t *testing.T, b *model.Bundle, payloadSum string) {
	t.Helper()
	if b.Checksum != payloadSum {
		t.Fatalf("checksum %q, payload hashes to %q", b.Checksum, payloadSum)
	}
	pub := &Published{Bundle: b}
	preds := map[features.Target][]float64{}
	for _, tg := range features.PodTargets {
		m := b.Target(tg)
		if m == nil {
			continue
		}
		schema := m.Schema()
		if schema.Len() != len(m.Columns) {
			t.Fatalf("%s: schema of %d columns for %v", tg, schema.Len(), m.Columns)
		}
		for _, row := range fuzzRows {
			x := schema.Build(&row, nil)
			y := m.Predict(x)
			if math.IsNaN(y) || y < m.MinMs || y > m.MaxMs {
				t.Fatalf("%s: prediction %v for %+v outside [%v, %v]", tg, y, row, m.MinMs, m.MaxMs)
			}
			for _, q := range []float64{0.05, 0.5, 0.9, 0.95} {
				if v := m.Quantile(x, y, q); math.IsNaN(v) || v < m.MinMs || v > m.MaxMs {
					t.Fatalf("%s: quantile %v = %v outside [%v, %v]", tg, q, v, m.MinMs, m.MaxMs)
				}
			}
			if v := m.PredictLinear(x); math.IsNaN(v) || v < m.MinMs || v > m.MaxMs {
				t.Fatalf("%s: linear part %v outside [%v, %v]", tg, v, m.MinMs, m.MaxMs)
			}
			m.OutOfRange(x)
			preds[tg] = append(preds[tg], y)
		}
		if m.Trees != nil {
			if dump, err := pub.TreeDump(tg); err == nil && !json.Valid(dump) {
				t.Fatalf("%s: tree dump is not JSON", tg)
			}
		}
	}
	transferPreds := checkTransferAccepted(t, b.Transfer)
	// A predictor that saves what it fetched, and a trainer that serves a
	// loaded bundle, re-encode it: that must give back the same models.
	data, err := Encode(b, nil)
	if err != nil {
		t.Fatalf("accepted bundle does not re-encode: %v", err)
	}
	again, err := Decode(data, nil)
	if err != nil {
		t.Fatalf("re-encoded bundle refused: %v", err)
	}
	for _, tg := range features.PodTargets {
		m := again.Target(tg)
		if (m == nil) != (b.Target(tg) == nil) {
			t.Fatalf("%s: model lost or gained in re-encoding", tg)
		}
		for i, row := range fuzzRows {
			if m == nil {
				break
			}
			if y := m.Predict(m.Schema().Build(&row, nil)); y != preds[tg][i] {
				t.Fatalf("%s row %d: %v after re-encoding, %v before", tg, i, y, preds[tg][i])
			}
		}
	}
	if again := checkTransferAccepted(t, again.Transfer); !slices.Equal(again, transferPreds) {
		t.Fatalf("transfer predictions %v after re-encoding, %v before", again, transferPreds)
	}
}

// checkTransferAccepted asserts what pair prediction needs of an accepted
// transfer model: finite predictions within its clamps for any class, size
// and contention, farther classes never faster, quantiles within the
// clamps. It returns the predictions it made.
func checkTransferAccepted(t *testing.T, m *model.TransferModel) []float64 {
	t.Helper()
	if m == nil {
		return nil
	}
	var preds []float64
	for _, tokens := range []int64{0, 1, 963, 1 << 20, math.MaxInt64} {
		for _, bpt := range []float64{0, 1, 131072, math.MaxFloat64} {
			for _, conc := range []int64{0, 1, 7, math.MaxInt64} {
				prev := 0.0
				for c := features.LinkClass(-1); c <= features.NumLinkClasses; c++ {
					y, ok := m.Predict(c, tokens, bpt, conc)
					if !ok {
						preds = append(preds, -1)
						continue
					}
					if math.IsNaN(y) || y < m.MinMs || y > m.MaxMs {
						t.Fatalf("transfer %s %d tokens × %v B, %d concurrent: %v outside [%v, %v]", c, tokens, bpt, conc, y, m.MinMs, m.MaxMs)
					}
					if y < prev {
						t.Fatalf("transfer %s predicts %v, below a nearer class's %v", c, y, prev)
					}
					prev = y
					for _, q := range []float64{0.05, 0.5, 0.9} {
						if v := m.Quantile(c, y, q); math.IsNaN(v) || v < m.MinMs || v > m.MaxMs {
							t.Fatalf("transfer %s quantile %v = %v outside [%v, %v]", c, q, v, m.MinMs, m.MaxMs)
						}
					}
					preds = append(preds, y)
				}
			}
		}
	}
	return preds
}

func FuzzDecodeBundle(f *testing.F) {
	for _, b := range fuzzSeedBundles(f) {
		for _, key := range [][]byte{nil, fuzzKey} {
			data, err := Encode(b, key)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var env envelope
		for _, key := range [][]byte{nil, fuzzKey} {
			b, err := Decode(data, key)
			if err != nil {
				if b != nil {
					t.Fatal("Decode returned a bundle with an error")
				}
				continue
			}
			if err := json.Unmarshal(data, &env); err != nil {
				t.Fatalf("accepted an envelope encoding/json refuses: %v", err)
			}
			if key != nil && env.HMAC == "" {
				t.Fatal("accepted an unsigned bundle with a key required")
			}
			sum := sha256.Sum256(env.Payload)
			checkAccepted(t, b, hex.EncodeToString(sum[:]))
		}
	})
}

// FuzzDecodeBundlePayload fuzzes what lies behind the checksum: the payload
// is wrapped in a correct envelope, so mutations reach the model checks
// (Prepare) instead of stopping at the checksum.
func FuzzDecodeBundlePayload(f *testing.F) {
	for _, b := range fuzzSeedBundles(f) {
		payload, err := json.Marshal(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(payload)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) {
			return // the envelope would not be JSON: FuzzDecodeBundle's ground
		}
		var head struct {
			Version uint64 `json:"version"`
		}
		json.Unmarshal(payload, &head)
		sum := sha256.Sum256(payload)
		data := fmt.Appendf(nil, `{"format":%q,"version":%d,"sha256":"%x","payload":%s}`, Format, head.Version, sum, payload)
		b, err := Decode(data, nil)
		if err != nil {
			return
		}
		checkAccepted(t, b, hex.EncodeToString(sum[:]))
	})
}

// fuzzSeedBundles are small bundles of every kind.
func fuzzSeedBundles(tb testing.TB) []*model.Bundle {
	full := modeltest.Bundle(tb)
	ttftOnly := modeltest.Bundle(tb)
	ttftOnly.TPOT = nil
	logTrees := modeltest.Bundle(tb)
	logTrees.TTFT.Kind = model.KindLogTrees
	if err := logTrees.TTFT.Prepare(); err != nil {
		tb.Fatal(err)
	}
	linear := modeltest.Bundle(tb)
	linear.TTFT.Kind, linear.TTFT.Trees = model.KindLinear, nil
	linear.XGBoostMissing = true
	withTransfer := modeltest.Bundle(tb)
	withTransfer.Transfer = modeltest.TransferModel(tb)
	return []*model.Bundle{full, ttftOnly, logTrees, linear, withTransfer, {Version: 1}}
}
