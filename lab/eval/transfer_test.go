package eval

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

// The simulated P/D fleet's transfers are a bandwidth law per link class
// (with links shared as transfers come and go): the model must learn each
// class's bandwidth to within a few percent and predict long transfers
// from short ones.
func TestEvaluateTransferOnSimulatedRuns(t *testing.T) {
	samples, err := SimulateTransfers(context.Background(), 1, 60)
	if err != nil {
		t.Fatal(err)
	}
	r, err := EvaluateTransfer(context.Background(), samples, TransferOptions{Seeds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Classes) != 4 || r.Samples != len(samples) {
		t.Fatalf("classes %v of %d samples, want same-node, same-rack, same-zone and cross-zone", r.Classes, r.Samples)
	}
	if r.Holdout.MAPE > 10 || r.Holdout.TestRows < r.Samples/12 {
		t.Errorf("holdout %+v: want MAPE ≤ 10%% on a tenth of the samples", r.Holdout)
	}
	links := sim.DefaultLinks()
	for _, k := range r.HoldoutByClass {
		c, _ := features.ParseLinkClass(k.Class)
		if ratio := k.BytesPerSec / links[c].BytesPerSec; math.Abs(ratio-1) > 0.05 {
			t.Errorf("%s: learned %.3g B/s, the simulator's link is %.3g", k.Class, k.BytesPerSec, links[c].BytesPerSec)
		}
	}
	if n := len(r.Service); n != 5 || r.Service[n-1].Class != "all" || r.Service[n-1].TestRows == 0 || r.Service[n-1].MAPE > 10 {
		t.Errorf("through the service: %+v", r.Service)
	}
	if len(r.Extrapolation) == 0 {
		t.Fatal("no class to extrapolate on")
	}
	for _, x := range r.Extrapolation {
		if math.Abs(x.Bias) > 10 {
			t.Errorf("%s: median bias %.1f%% on transfers > %d tokens, trained on ≤ %d", x.Class, x.Bias, r.TestMin, r.TrainMax)
		}
	}
	var out bytes.Buffer
	if err := WriteTransferTable(&out, r); err != nil || !strings.Contains(out.String(), "extrapolation: trained on transfers of <= 1024 tokens") {
		t.Fatalf("table: %v\n%s", err, out.String())
	}
}

// A sidecar's report as `headroom whatif --pd-samples` writes it reads back
// as training samples: requests with a measured transfer only.
func TestReadPDSamples(t *testing.T) {
	place := features.Topology{Node: "n0", Rack: "r0", Zone: "a", Region: "eu"}
	far := features.Topology{Node: "n1", Rack: "r0", Zone: "b", Region: "eu"}
	lines := `{"request_id":1,"input_token_length":900,"split":true,"prefill_pod":"prefill-0","decode_pod":"decode-1",` +
		`"prefill_topology":{"node":"n0","rack":"r0","zone":"a","region":"eu"},"decode_topology":{"node":"n1","rack":"r0","zone":"b","region":"eu"},` +
		`"link_class":"cross-zone","actual_kv_transfer_ms":40.5,"kv_transfer_tokens":800,"kv_bytes_per_token":262144,` +
		`"concurrent_transfers":2,"actual_ttft_ms":300,"actual_tpot_ms":20}
{"request_id":2,"input_token_length":50,"split":false,"decode_pod":"decode-0","decode_topology":{"node":"n1"},"actual_ttft_ms":90}
`
	got, err := ReadPDSamples(strings.NewReader(lines))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d samples, want the one with a transfer", len(got))
	}
	want := features.Transfer{Ms: 40.5, Tokens: 800, BytesPerToken: 262144, PrefillPod: "prefill-0", DecodePod: "decode-1",
		Prefill: place, Decode: far, Concurrent: 2}
	if s := got[0]; *s.Transfer != want || s.ActualTTFTMs != 300 || s.Row.InputTokenLength != 900 {
		t.Fatalf("sample %+v %+v", s, s.Transfer)
	}
	if _, err := ReadPDSamples(strings.NewReader("{not json\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad line: %v", err)
	}
}
