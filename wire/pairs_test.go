package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// pairsCandidate is the JSON of a candidate with every pod field.
func pairsCandidate(pod, node, rack, zone, region string, extra string) string {
	return fmt.Sprintf(`{"pod":%q,"topology":{"node":%q,"rack":%q,"zone":%q,"region":%q},`+
		`"kv_cache_percentage":0.5,"num_request_waiting":2,"num_request_running":7,"prefix_cache_score":0.25%s}`,
		pod, node, rack, zone, region, extra)
}

// pairsBody is a valid body with the given top-level members replaced or
// added (a member set to "" is left out).
func pairsBody(members map[string]string) string {
	m := map[string]string{
		"input_token_length": "4096",
		"prefill":            "[" + pairsCandidate("p-0", "n1", "r1", "z1", "eu", "") + "," + pairsCandidate("p-1", "n2", "r1", "z1", "eu", "") + "]",
		"decode":             "[" + pairsCandidate("d-0", "n3", "r2", "z1", "eu", `,"pod_type":"decode"`) + "]",
	}
	for k, v := range members {
		m[k] = v
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		if m[k] != "" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, m[k]))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestDecodePairsRequest(t *testing.T) {
	body := pairsBody(map[string]string{
		"num_tokens_generated": "1", "encoder_input_size": "2", "kv_bytes_per_token": "131072",
		"ttft_slo_ms": "500", "tpot_slo_ms": "50.5", "k": "3", "matrix": "true", "unknown_field": `{"x":[1,2]}`,
		"decode": "[" + pairsCandidate("d-0", "n3", "r2", "z1", "eu",
			`,"pod_type":"decode","prefill_tokens_in_flight":100,"decode_tokens_in_flight":2000,"encoder_matched_size":1,`+
				`"kv_transfers_in_flight":3,"input_token_length":4096,"num_tokens_generated":1,"actual_ttft_ms":5`) + "]",
	})
	req, errs := DecodePairsRequest([]byte(body), 0)
	if errs != nil {
		t.Fatalf("errors: %v", Describe(errs))
	}
	want := PairsRequest{
		InputTokenLength: 4096, NumTokensGenerated: 1, EncoderInputSize: 2, KVBytesPerToken: 131072,
		TTFTSLOMs: 500, TPOTSLOMs: 50.5, K: 3, Matrix: true,
		Prefill: []PairCandidate{
			{Pod: "p-0", Topology: features.Topology{Node: "n1", Rack: "r1", Zone: "z1", Region: "eu"},
				Row: features.Row{KVCachePercentage: 0.5, NumRequestWaiting: 2, NumRequestRunning: 7, PrefixCacheScore: 0.25}},
			{Pod: "p-1", Topology: features.Topology{Node: "n2", Rack: "r1", Zone: "z1", Region: "eu"},
				Row: features.Row{KVCachePercentage: 0.5, NumRequestWaiting: 2, NumRequestRunning: 7, PrefixCacheScore: 0.25}},
		},
		Decode: []PairCandidate{
			{Pod: "d-0", Topology: features.Topology{Node: "n3", Rack: "r2", Zone: "z1", Region: "eu"}, Concurrent: 4,
				Row: features.Row{KVCachePercentage: 0.5, NumRequestWaiting: 2, NumRequestRunning: 7, PrefixCacheScore: 0.25,
					PodType: "decode", PrefillTokensInFlight: 100, DecodeTokensInFlight: 2000, EncoderMatchedSize: 1}},
		},
	}
	if got, _ := json.Marshal(req); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("decoded\n%s\nwant\n%s", got, must(json.Marshal(want)))
	}

	// A topology needs only its node, as a sample's does; rack, zone and
	// region left out or null are empty, on both sides alike.
	body = pairsBody(map[string]string{"decode": `[{"pod":"d","topology":{"node":"n9","rack":null},` +
		`"kv_cache_percentage":0,"num_request_waiting":0,"num_request_running":0,"prefix_cache_score":0}]`})
	req, errs = DecodePairsRequest([]byte(body), 0)
	if errs != nil || req.Decode[0].Topology != (features.Topology{Node: "n9"}) {
		t.Errorf("a node alone: %+v, %v", req.Decode, Describe(errs))
	}

	// The request's fields may come from the candidates alone, as a
	// router's bulk rows carry them.
	body = pairsBody(map[string]string{"input_token_length": "",
		"decode": "[" + pairsCandidate("d-0", "n3", "r2", "z1", "eu", `,"input_token_length":300,"num_tokens_generated":1`) + "]"})
	req, errs = DecodePairsRequest([]byte(body), 0)
	if errs != nil || req.InputTokenLength != 300 || req.NumTokensGenerated != 1 {
		t.Errorf("request fields from a candidate: %+v, %v", req, Describe(errs))
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A pod named twice in a list is an error at the later candidate, naming
// the first, in a short list and in one long enough to be indexed.
func TestDecodePairsRequestDuplicatePods(t *testing.T) {
	for _, n := range []int{10, 40} {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("p%d", i)
		}
		names[5], names[n-3], names[n-2] = "p1", "p1", "p2"
		var cs []string
		for _, name := range names {
			cs = append(cs, pairsCandidate(name, "n", "r", "z", "e", ""))
		}
		_, errs := DecodePairsRequest([]byte(pairsBody(map[string]string{"prefill": "[" + strings.Join(cs, ",") + "]"})), 64)
		var got []string
		for _, e := range errs {
			got = append(got, locPath(e.Loc)+": "+e.Msg)
		}
		want := []string{
			`prefill[5].pod: Value error, pod "p1" is also prefill[1]`,
			fmt.Sprintf(`prefill[%d].pod: Value error, pod "p1" is also prefill[1]`, n-3),
			fmt.Sprintf(`prefill[%d].pod: Value error, pod "p2" is also prefill[2]`, n-2),
		}
		if !slices.Equal(got, want) {
			t.Errorf("%d candidates: errors\n%s\nwant\n%s", n, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestDecodePairsRequestErrors(t *testing.T) {
	long := strings.Repeat("n", MaxTopologyLabelLen+1)
	three := "[" + pairsCandidate("a", "n", "r", "z", "e", "") + "," + pairsCandidate("b", "n", "r", "z", "e", "") + "," +
		pairsCandidate("c", "n", "r", "z", "e", "") + "]"
	type fieldErr struct{ path, typ string }
	tests := []struct {
		name    string
		body    string
		max     int
		want    []fieldErr
		wantMsg string // a substring of the first error's message
	}{
		{"matrix not a boolean", pairsBody(map[string]string{"matrix": `"all"`}), 0,
			[]fieldErr{{"matrix", "bool_parsing"}}, ""},
		{"empty prefill list", pairsBody(map[string]string{"prefill": "[]"}), 0,
			[]fieldErr{{"prefill", "too_short"}}, ""},
		{"empty decode list", pairsBody(map[string]string{"decode": "[]"}), 0,
			[]fieldErr{{"decode", "too_short"}}, ""},
		{"too many candidates", pairsBody(map[string]string{"prefill": three}), 2,
			[]fieldErr{{"prefill", "too_long"}}, "at most 2 items"},
		{"missing lists and prompt", `{"k":1}`, 0,
			[]fieldErr{{"input_token_length", "missing"}, {"prefill", "missing"}, {"decode", "missing"}}, ""},
		{"prefill not a list", pairsBody(map[string]string{"prefill": `{"pod":"x"}`}), 0,
			[]fieldErr{{"prefill", "list_type"}}, ""},
		{"candidate not an object", pairsBody(map[string]string{"decode": `[7]`}), 0,
			[]fieldErr{{"decode[0]", "model_attributes_type"}}, ""},
		{"missing topology", pairsBody(map[string]string{"decode": `[{"pod":"d","kv_cache_percentage":0,"num_request_waiting":0,"num_request_running":0,"prefix_cache_score":0}]`}), 0,
			[]fieldErr{{"decode[0].topology", "missing"}}, ""},
		{"missing pod fields", pairsBody(map[string]string{"decode": `[{"pod":"d","topology":{"node":"n","rack":"r","zone":"z","region":"e"}}]`}), 0,
			[]fieldErr{{"decode[0].kv_cache_percentage", "missing"}, {"decode[0].num_request_waiting", "missing"},
				{"decode[0].num_request_running", "missing"}, {"decode[0].prefix_cache_score", "missing"}}, ""},
		{"missing node", pairsBody(map[string]string{"prefill": "[" + pairsCandidate("a", "n", "r", "z", "e", "") + "," +
			strings.Replace(pairsCandidate("b", "n", "r", "z", "e", ""), `"node":"n",`, "", 1) + "]"}), 0,
			[]fieldErr{{"prefill[1].topology.node", "missing"}}, ""},
		{"null node", pairsBody(map[string]string{"decode": "[" + strings.Replace(pairsCandidate("d", "n", "r", "z", "e", ""), `"node":"n"`, `"node":null`, 1) + "]"}), 0,
			[]fieldErr{{"decode[0].topology.node", "missing"}}, ""},
		{"long rack label", pairsBody(map[string]string{"decode": "[" + pairsCandidate("d", "n", strings.Repeat("r", MaxTopologyLabelLen+1), "z", "e", "") + "]"}), 0,
			[]fieldErr{{"decode[0].topology.rack", "string_too_long"}}, "at most 63 characters"},
		{"empty rack", pairsBody(map[string]string{"decode": "[" + pairsCandidate("d", "n", "", "z", "e", "") + "]"}), 0,
			[]fieldErr{{"decode[0].topology.rack", "string_too_short"}}, ""},
		{"topology label not a string", pairsBody(map[string]string{"decode": "[" +
			strings.Replace(pairsCandidate("d", "n", "r", "z", "e", ""), `"region":"e"`, `"region":3`, 1) + "]"}), 0,
			[]fieldErr{{"decode[0].topology.region", "string_type"}}, ""},
		{"topology not an object", pairsBody(map[string]string{"decode": `[{"pod":"d","topology":"rack-1","kv_cache_percentage":0,"num_request_waiting":0,"num_request_running":0,"prefix_cache_score":0}]`}), 0,
			[]fieldErr{{"decode[0].topology", "model_attributes_type"}}, ""},
		{"long node name", pairsBody(map[string]string{"decode": "[" + pairsCandidate("d", long, "r", "z", "e", "") + "]"}), 0,
			[]fieldErr{{"decode[0].topology.node", "string_too_long"}}, ""},
		{"long pod name", pairsBody(map[string]string{"decode": "[" + pairsCandidate(strings.Repeat("p", MaxPodNameLen+1), "n", "r", "z", "e", "") + "]"}), 0,
			[]fieldErr{{"decode[0].pod", "string_too_long"}}, "at most 253 characters"},
		{"empty pod name", pairsBody(map[string]string{"decode": "[" + pairsCandidate("", "n", "r", "z", "e", "") + "]"}), 0,
			[]fieldErr{{"decode[0].pod", "string_too_short"}}, ""},
		{"duplicate pod", pairsBody(map[string]string{"prefill": "[" + pairsCandidate("a", "n", "r", "z", "e", "") + "," +
			pairsCandidate("a", "n2", "r", "z", "e", "") + "]"}), 0,
			[]fieldErr{{"prefill[1].pod", "value_error"}}, "also prefill[0]"},
		{"bad pod field", pairsBody(map[string]string{"prefill": "[" + pairsCandidate("a", "n", "r", "z", "e", `,"prefill_tokens_in_flight":-1`) + "]"}), 0,
			[]fieldErr{{"prefill[0].prefill_tokens_in_flight", "greater_than_equal"}}, ""},
		{"repeated pod field", pairsBody(map[string]string{"prefill": "[" + pairsCandidate("a", "n", "r", "z", "e", `,"num_request_running":3`) + "]"}), 0,
			[]fieldErr{{"prefill[0].num_request_running", "duplicate_key"}}, ""},
		{"candidate disagrees on the prompt", pairsBody(map[string]string{"decode": "[" + pairsCandidate("d", "n", "r", "z", "e", `,"input_token_length":12`) + "]"}), 0,
			[]fieldErr{{"decode[0].input_token_length", "value_error"}}, "(4096)"},
		{"candidates disagree without a top level", pairsBody(map[string]string{"input_token_length": "",
			"prefill": "[" + pairsCandidate("a", "n", "r", "z", "e", `,"input_token_length":10`) + "]",
			"decode":  "[" + pairsCandidate("d", "n", "r", "z", "e", `,"input_token_length":12`) + "]"}), 0,
			// The body lists decode first, so decode[0] gives the value.
			[]fieldErr{{"prefill[0].input_token_length", "value_error"}}, "decode[0].input_token_length (12)"},
		{"negative SLO", pairsBody(map[string]string{"ttft_slo_ms": "-5"}), 0,
			[]fieldErr{{"ttft_slo_ms", "greater_than_equal"}}, ""},
		{"SLO not a number", pairsBody(map[string]string{"tpot_slo_ms": `"fast"`}), 0,
			[]fieldErr{{"tpot_slo_ms", "float_parsing"}}, ""},
		{"fractional k", pairsBody(map[string]string{"k": "1.5"}), 0,
			[]fieldErr{{"k", "int_from_float"}}, ""},
		{"huge KV size", pairsBody(map[string]string{"kv_bytes_per_token": "1e12"}), 0,
			[]fieldErr{{"kv_bytes_per_token", "less_than_equal"}}, ""},
		{"bad in-flight transfers", pairsBody(map[string]string{"decode": "[" + pairsCandidate("d", "n", "r", "z", "e", `,"kv_transfers_in_flight":-2`) + "]"}), 0,
			[]fieldErr{{"decode[0].kv_transfers_in_flight", "greater_than_equal"}}, ""},
		{"duplicate list", `{"input_token_length":1,"prefill":[],"prefill":[],"decode":[]}`, 0,
			[]fieldErr{{"prefill", "too_short"}, {"prefill", "duplicate_key"}, {"decode", "too_short"}}, ""},
		{"not an object", `[1]`, 0, []fieldErr{{"body", "model_attributes_type"}}, ""},
		{"not JSON", `{"prefill":[`, 0, []fieldErr{{"body", "json_invalid"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := DecodePairsRequest([]byte(tt.body), tt.max)
			var got []fieldErr
			for _, e := range errs {
				p := locPath(e.Loc)
				if e.Type == "json_invalid" {
					p = "body"
				}
				got = append(got, fieldErr{p, e.Type})
				if _, err := json.Marshal(e); err != nil {
					t.Errorf("error %+v does not encode: %v", e, err)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("errors %v, want %v", got, tt.want)
			}
			if tt.wantMsg != "" && !strings.Contains(errs[0].Msg, tt.wantMsg) {
				t.Errorf("message %q does not say %q", errs[0].Msg, tt.wantMsg)
			}
		})
	}
}

func TestAppendPairsResponse(t *testing.T) {
	req := &PairsRequest{InputTokenLength: 100, TTFTSLOMs: 300,
		Prefill: []PairCandidate{{Pod: "p-0"}, {Pod: `p-"1"`}}, Decode: []PairCandidate{{Pod: "d-0"}}}
	e := func(ms float64) Estimate { return Estimate{Ms: ms, Bounds: [2]float64{ms / 2, ms * 2}} }
	pair := PairOption{Prefill: 1, Decode: 0, Link: features.SameRack, TransferTokens: 75,
		PrefillPart: e(100), Transfer: e(20), DecodeLoadMs: 4.5, TTFT: e(124.5), TPOT: e(30), TTFTHeadroomMs: 175.5}
	alone := PairOption{Prefill: NoSplit, Decode: 0, TTFT: e(400), TPOT: e(30), TTFTHeadroomMs: -100}
	r := &PairsRanking{RankedBy: RankBySLOHeadroom, Pairs: []PairOption{pair}, NoSplit: []PairOption{alone}, Best: pair,
		TotalPairs: 2, UnknownPairs: 1, UnknownLinks: []features.LinkClass{features.CrossRegion}, TransferModel: true}
	meta := PredictionMeta{PredictedAt: []byte("2026-01-01T00:00:00Z"), Objective: "mean", Quantile: []byte("0.9"), LastLoad: "2026-01-01T00:00:00Z"}
	out := AppendPairsResponse(nil, req, r, &meta, 0.25)

	var got struct {
		Split    bool   `json:"split"`
		RankedBy string `json:"ranked_by"`
		Best     struct {
			PrefillPod string `json:"prefill_pod"`
		} `json:"best"`
		Pairs []map[string]any `json:"pairs"`
		// NoSplit options have a null prefill pod.
		NoSplit      []map[string]any `json:"no_split"`
		Total        int              `json:"total_pairs"`
		Unknown      int              `json:"unknown_transfer_pairs"`
		UnknownLinks []string         `json:"unknown_link_classes"`
		Transfer     bool             `json:"kv_transfer_model"`
		Objective    string           `json:"objective_type"`
		Processing   float64          `json:"processing_time_ms"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if !got.Split || got.RankedBy != "slo_headroom" || got.Best.PrefillPod != `p-"1"` || got.Total != 2 || got.Unknown != 1 ||
		!slices.Equal(got.UnknownLinks, []string{"cross-region"}) || !got.Transfer || got.Objective != "mean" || got.Processing != 0.25 {
		t.Errorf("response %s", out)
	}
	p := got.Pairs[0]
	for k, want := range map[string]any{"decode_pod": "d-0", "prefill_index": 1.0, "link_class": "same-rack", "kv_transfer_tokens": 75.0,
		"ttft_ms": 124.5, "prefill_ms": 100.0, "kv_transfer_ms": 20.0, "decode_load_ms": 4.5, "tpot_ms": 30.0,
		"ttft_headroom_ms": 175.5, "meets_slo": true, "split": true} {
		if p[k] != want {
			t.Errorf("pair %s = %v, want %v", k, p[k], want)
		}
	}
	if b, _ := json.Marshal(p["kv_transfer_prediction_bounds"]); string(b) != "[10,40]" {
		t.Errorf("transfer bounds %s", b)
	}
	if _, ok := p["tpot_headroom_ms"]; ok {
		t.Errorf("TPOT headroom without a TPOT SLO")
	}
	if _, ok := p["decode_load_prediction_bounds"]; ok {
		t.Errorf("the decode load, a shift, written with bounds: %v", p)
	}
	n := got.NoSplit[0]
	if n["prefill_pod"] != nil || n["split"] != false || n["meets_slo"] != false || n["prefill_index"] != -1.0 {
		t.Errorf("no-split option %v", n)
	}
	if _, ok := n["kv_transfer_ms"]; ok {
		t.Errorf("no-split option with a transfer: %v", n)
	}
}

func TestAppendPairsResponseMatrix(t *testing.T) {
	req := &PairsRequest{InputTokenLength: 100, Matrix: true,
		Prefill: []PairCandidate{{Pod: "p-0"}, {Pod: "p-1"}}, Decode: []PairCandidate{{Pod: "d-0"}, {Pod: "d-1"}}}
	e := func(ms float64) Estimate { return Estimate{Ms: ms, Bounds: [2]float64{ms / 2, ms * 2}} }
	pair := func(p, d, rank int, ttft float64) PairOption {
		return PairOption{Prefill: p, Decode: d, Rank: rank, TTFT: e(ttft), TPOT: e(20)}
	}
	alone := func(d, rank int, ttft, tpot float64) PairOption {
		return PairOption{Prefill: NoSplit, Decode: d, Rank: rank, TTFT: e(ttft), TPOT: e(tpot), Extrapolated: d == 1}
	}
	// Pair (p-1, d-0) has no estimate (its link class is unknown).
	r := &PairsRanking{RankedBy: RankByTTFT, Best: pair(0, 1, 0, 90),
		EveryPair:    []PairOption{pair(0, 0, 2, 120), pair(0, 1, 0, 90), pair(1, 1, 1, 100.5)},
		EveryNoSplit: []PairOption{alone(0, 3, 300, 20), alone(1, 4, 400, 30)},
		PairAt:       []int32{0, -1, 1, 2}, PrefillExtrapolated: []bool{false, true},
		TotalPairs: 4, UnknownPairs: 1, UnknownLinks: []features.LinkClass{features.CrossZone}, TransferModel: true}
	meta := PredictionMeta{PredictedAt: []byte("2026-01-01T00:00:00Z"), Objective: "mean", Quantile: []byte("0.9"), LastLoad: "2026-01-01T00:00:00Z"}
	out := AppendPairsResponse(nil, req, r, &meta, 0.25)
	var got struct {
		Split  bool `json:"split"`
		Best   map[string]any
		Matrix struct {
			Rank          [][]*int     `json:"rank"`
			TTFT          [][]*float64 `json:"ttft_ms"`
			NoSplitRank   []int        `json:"no_split_rank"`
			NoSplitTTFT   []float64    `json:"no_split_ttft_ms"`
			TPOT          []float64    `json:"tpot_ms"`
			PrefillExtrap []bool       `json:"prefill_extrapolated"`
			DecodeExtrap  []bool       `json:"decode_extrapolated"`
		} `json:"matrix"`
		Pairs   []any `json:"pairs"`
		NoSplit []any `json:"no_split"`
		Total   int   `json:"total_pairs"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	m := got.Matrix
	ranks := func(row []*int) []int {
		var out []int
		for _, r := range row {
			if r == nil {
				out = append(out, -1)
			} else {
				out = append(out, *r)
			}
		}
		return out
	}
	if !got.Split || got.Best["rank"] != 0.0 || got.Pairs != nil || got.NoSplit != nil || got.Total != 4 ||
		!slices.Equal(ranks(m.Rank[0]), []int{2, -1}) || !slices.Equal(ranks(m.Rank[1]), []int{0, 1}) ||
		m.TTFT[0][1] != nil || *m.TTFT[1][1] != 100.5 || *m.TTFT[0][0] != 120 ||
		!slices.Equal(m.NoSplitRank, []int{3, 4}) || !slices.Equal(m.NoSplitTTFT, []float64{300, 400}) ||
		!slices.Equal(m.TPOT, []float64{20, 30}) || !slices.Equal(m.PrefillExtrap, []bool{false, true}) ||
		!slices.Equal(m.DecodeExtrap, []bool{false, true}) {
		t.Errorf("matrix answer %s", out)
	}
}

// FuzzDecodePairsRequest checks what holds for every body: no panic, well
// formed errors, json_invalid exactly for what is not JSON, and an
// accepted request within every bound.
func FuzzDecodePairsRequest(f *testing.F) {
	for _, s := range []string{
		pairsBody(nil),
		pairsBody(map[string]string{"ttft_slo_ms": "500", "tpot_slo_ms": `"40"`, "k": "2", "kv_bytes_per_token": "1e5"}),
		pairsBody(map[string]string{"input_token_length": "", "decode": "[" + pairsCandidate("d", "n", "r", "z", "e", `,"input_token_length":7,"kv_transfers_in_flight":1`) + "]"}),
		pairsBody(map[string]string{"prefill": "[]", "decode": `[{"pod":"","topology":null}]`}),
		`{"prefill":[{"topology":{"node":"a","node":"b"}}]}`,
	} {
		f.Add([]byte(s))
	}
	const max = 4
	f.Fuzz(func(t *testing.T, body []byte) {
		req, errs := DecodePairsRequest(body, max)
		checkErrs(t, body, errs)
		checkJSONVerdict(t, body, errs)
		if len(errs) > 0 {
			if req.Prefill != nil || req.Decode != nil || req.InputTokenLength != 0 {
				t.Fatalf("rejected body returned %+v", req)
			}
			return
		}
		if req.K < 0 || req.InputTokenLength < 0 || !(req.KVBytesPerToken >= 0 && req.KVBytesPerToken <= MaxKVBytesPerToken) ||
			!(req.TTFTSLOMs >= 0) || !(req.TPOTSLOMs >= 0) {
			t.Fatalf("accepted %+v from %q", req, body)
		}
		for _, list := range [][]PairCandidate{req.Prefill, req.Decode} {
			if len(list) < 1 || len(list) > max {
				t.Fatalf("accepted %d candidates from %q", len(list), body)
			}
			pods := map[string]bool{}
			for _, c := range list {
				checkRow(t, c.Row, DefaultDecodeLimits().MaxPredictCount)
				tp := c.Topology
				if c.Pod == "" || pods[c.Pod] || tp.Node == "" || c.Concurrent < 0 {
					t.Fatalf("accepted candidate %+v from %q", c, body)
				}
				pods[c.Pod] = true
			}
		}
	})
}

func TestAppendMs(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {1, "1"}, {12.5, "12.5"}, {0.0004, "0"}, {0.0005, "0.001"}, {123.4567, "123.457"},
		{-2.25, "-2.25"}, {-0.0001, "0"}, {999.9996, "1000"}, {1e11 + 0.5, "100000000000.5"}, {2e12, "2000000000000"},
		{math.NaN(), "0"}, {math.Inf(1), "0"},
	} {
		got := string(appendMs(nil, tt.v))
		if got != tt.want {
			t.Errorf("appendMs(%v) = %s, want %s", tt.v, got, tt.want)
		}
		var back float64
		if err := json.Unmarshal([]byte(got), &back); err != nil || math.Abs(back-tt.v) > 0.0005 && !math.IsNaN(tt.v) && !math.IsInf(tt.v, 0) {
			t.Errorf("appendMs(%v) = %s reads back as %v (%v)", tt.v, got, back, err)
		}
	}
}

// Labels read into the decoder's arena keep their values as the arena
// grows: a body of long labels and few other bytes outgrows its first
// allocation many times over.
func TestDecodePairsRequestLabelsSurviveTheArenaGrowing(t *testing.T) {
	label := func(kind string, i int) string {
		return fmt.Sprintf("%s-%d-%s", kind, i, strings.Repeat("x", MaxTopologyLabelLen-20))
	}
	var cs []string
	for i := range 40 {
		cs = append(cs, pairsCandidate(fmt.Sprintf("pod-%d", i), label("node", i), label("rack", i), label("zone", i), label("region", i), ""))
	}
	req, errs := DecodePairsRequest([]byte(pairsBody(map[string]string{"prefill": "[" + strings.Join(cs, ",") + "]"})), 64)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for i, c := range req.Prefill {
		want := features.Topology{Node: label("node", i), Rack: label("rack", i), Zone: label("zone", i), Region: label("region", i)}
		if c.Pod != fmt.Sprintf("pod-%d", i) || c.Topology != want {
			t.Fatalf("prefill[%d]: pod %q, topology %+v", i, c.Pod, c.Topology)
		}
	}
}
