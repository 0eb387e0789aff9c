package wire

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// randomSample is a valid training entry with every field set, labels and
// predictions included, and pod labels that need escaping now and then.
func randomSample(r *rand.Rand, i int) features.Sample {
	pods := []string{"", "prefill", "decode", "rôle \"x\"\n"}
	s := features.Sample{
		Row: features.Row{
			KVCachePercentage: r.Float64(), InputTokenLength: r.Int64N(1 << 20),
			NumRequestWaiting: r.Int64N(100), NumRequestRunning: r.Int64N(100), NumTokensGenerated: r.Int64N(4000),
			PrefixCacheScore: r.Float64(), PodType: pods[r.IntN(len(pods))],
			PrefillTokensInFlight: r.Int64N(1 << 26), DecodeTokensInFlight: r.Int64N(1 << 26),
			EncoderInputSize: r.Int64N(8), EncoderMatchedSize: r.Int64N(8),
		},
		ActualTTFTMs: r.Float64() * 5000, ActualTPOTMs: r.Float64() * 100,
	}
	if i%2 == 0 {
		s.PredictedTTFTMs, s.PredictedTPOTMs = r.Float64()*5000, r.Float64()*100
		s.Timestamp = time.Date(2026, 11, 29, 15, 42, 36, r.IntN(1e9), time.UTC)
	}
	if i%3 == 0 {
		place := func() features.Topology {
			return features.Topology{Node: "node-" + pods[r.IntN(len(pods))], Rack: pods[r.IntN(len(pods))],
				Zone: pods[r.IntN(len(pods))], Region: pods[r.IntN(len(pods))]}
		}
		s.Transfer = &features.Transfer{Ms: s.ActualTTFTMs * r.Float64(), Tokens: r.Int64N(s.Row.InputTokenLength + 1),
			Prefill: place(), Decode: place()}
		if i%2 == 0 {
			s.Transfer.BytesPerToken, s.Transfer.Concurrent = float64(r.IntN(1<<20)), r.Int64N(10)
			s.Transfer.PrefillPod, s.Transfer.DecodePod = "p-"+pods[r.IntN(len(pods))], "d-"+pods[r.IntN(len(pods))]
		}
	}
	return s
}

// What the encoders write, the decoders read back exactly: the request
// encoders and the decoders agree on every field.
func TestRequestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	samples := make([]features.Sample, 200)
	rows := make([]features.Row, len(samples))
	for i := range samples {
		samples[i] = randomSample(r, i)
		rows[i] = samples[i].Row
	}

	got, rejected, errs := DecodeTrainingBulk(AppendTrainingRequest(nil, samples), 0)
	if len(errs) > 0 || len(rejected) > 0 {
		t.Fatalf("encoded entries refused: %d rejected (%+v); %+v", len(rejected), rejected[:min(1, len(rejected))], errs)
	}
	if !reflect.DeepEqual(got, samples) {
		t.Fatalf("entries read back differently:\n got %+v\nwant %+v", got[0], samples[0])
	}

	gotRows, _, errs := DecodeBulkPredictRequest(AppendPredictRequest(nil, rows), 0, false, nil)
	if len(errs) > 0 {
		t.Fatalf("encoded rows refused: %+v", errs)
	}
	if !reflect.DeepEqual(gotRows, rows) {
		t.Fatalf("rows read back differently:\n got %+v\nwant %+v", gotRows[0], rows[0])
	}
}

func TestAppendRowShape(t *testing.T) {
	row := features.Row{KVCachePercentage: 0.25, InputTokenLength: 512, NumRequestRunning: 4, NumTokensGenerated: 1,
		PrefillTokensInFlight: 300}
	want := `{"kv_cache_percentage":0.25,"input_token_length":512,"num_request_waiting":0,"num_request_running":4,` +
		`"num_tokens_generated":1,"prefix_cache_score":0,"encoder_input_size":0,"encoder_matched_size":0,` +
		`"prefill_tokens_in_flight":300,"decode_tokens_in_flight":0}`
	if got := string(AppendRow(nil, &row)); got != want {
		t.Errorf("AppendRow =\n%s\nwant\n%s", got, want)
	}
	row.PodType = "decode"
	if got := string(AppendRow(nil, &row)); got != want[:len(want)-len(`,"encoder_input_size":0,"encoder_matched_size":0,"prefill_tokens_in_flight":300,"decode_tokens_in_flight":0}`)]+
		`,"pod_type":"decode","encoder_input_size":0,"encoder_matched_size":0,"prefill_tokens_in_flight":300,"decode_tokens_in_flight":0}` {
		t.Errorf("AppendRow with pod_type = %s", got)
	}
}

// RowObject has every row field, defaults included, with the row's values.
func TestRowObject(t *testing.T) {
	row := features.Row{KVCachePercentage: 0.5, InputTokenLength: 7, NumRequestRunning: 2, PrefixCacheScore: 0.25,
		EncoderMatchedSize: 1}
	got := RowObject(&row)
	want := map[string]any{
		"kv_cache_percentage": 0.5, "input_token_length": int64(7), "num_request_waiting": int64(0),
		"num_request_running": int64(2), "num_tokens_generated": int64(0), "prefix_cache_score": 0.25, "pod_type": "",
		"prefill_tokens_in_flight": int64(0), "decode_tokens_in_flight": int64(0), "encoder_input_size": int64(0),
		"encoder_matched_size": int64(1),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RowObject = %v\nwant %v", got, want)
	}
}

// A pairs request encoded is read back exactly, settings and candidates
// included, with and without the optional fields.
func TestPairsRequestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 50 {
		s := randomSample(r, i)
		req := PairsRequest{InputTokenLength: s.Row.InputTokenLength, NumTokensGenerated: s.Row.NumTokensGenerated,
			EncoderInputSize: s.Row.EncoderInputSize}
		if i%2 == 0 {
			req.KVBytesPerToken, req.TTFTSLOMs, req.TPOTSLOMs, req.K = 262144, 500+r.Float64(), 25.5, 1+r.IntN(8)
		}
		for _, list := range []*[]PairCandidate{&req.Prefill, &req.Decode} {
			for j := range 1 + r.IntN(4) {
				c := randomSample(r, j)
				row := c.Row
				row.InputTokenLength, row.NumTokensGenerated, row.EncoderInputSize = 0, 0, 0
				topo := features.Topology{Node: "n" + string(rune('a'+j))}
				if j%2 == 0 {
					topo.Rack, topo.Zone, topo.Region = "r1", "z1", "eu"
				}
				*list = append(*list, PairCandidate{Pod: "pod-" + string(rune('a'+j)), Topology: topo, Row: row,
					Concurrent: int64(j % 3)})
			}
		}
		body := AppendPairsRequest(nil, &req)
		got, errs := DecodePairsRequest(body, 0)
		if len(errs) > 0 {
			t.Fatalf("encoded pairs request refused: %+v\n%s", errs, body)
		}
		if !reflect.DeepEqual(got, req) {
			t.Fatalf("pairs request read back differently:\n got %+v\nwant %+v\n%s", got, req, body)
		}
	}
}
