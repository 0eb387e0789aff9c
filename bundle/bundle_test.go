package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
)

func TestBundleRoundTrip(t *testing.T) {
	b := modeltest.Bundle(t)
	data, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 7 || got.Checksum != b.Checksum || got.Checksum == "" {
		t.Fatalf("decoded version %d checksum %q, want 7 and %q", got.Version, got.Checksum, b.Checksum)
	}
	row := features.Row{NumRequestRunning: 6, InputTokenLength: 300, KVCachePercentage: 0.2}
	for _, tg := range features.PodTargets {
		want, have := b.Target(tg), got.Target(tg)
		x := want.Schema().Build(&row, nil)
		if w, h := want.Predict(x), have.Predict(x); w != h {
			t.Errorf("%s: prediction %v after round trip, %v before", tg, h, w)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	b := modeltest.Bundle(t)
	key := []byte("0123456789abcdef-key")
	signed, err := Encode(b, key)
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(data []byte, from, to string) []byte {
		if !bytes.Contains(data, []byte(from)) {
			t.Fatalf("test bug: %q not in bundle", from)
		}
		return bytes.Replace(data, []byte(from), []byte(to), 1)
	}
	// A payload edited and re-checksummed, to reach the checks after the checksum.
	rechecksum := func(edit func(map[string]any)) []byte {
		var env map[string]json.RawMessage
		json.Unmarshal(unsigned, &env)
		var payload map[string]any
		json.Unmarshal(env["payload"], &payload)
		edit(payload)
		nb := &model.Bundle{}
		raw, _ := json.Marshal(payload)
		if err := json.Unmarshal(raw, nb); err != nil {
			t.Fatal(err)
		}
		out, err := Encode(nb, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
		key  []byte
		want error
		msg  string
	}{
		{"not json", []byte("{"), nil, nil, "decode bundle"},
		{"other format", tamper(unsigned, Format, "pickle/1"), nil, nil, "format"},
		{"payload edited", tamper(unsigned, `"intercept":20`, `"intercept":21`), nil, ErrChecksum, ""},
		{"unsigned when a key is required", unsigned, key, ErrUnsigned, ""},
		{"signed with another key", signed, []byte("another-key-of-16+"), ErrBadSignature, ""},
		{"unknown column", rechecksum(func(p map[string]any) {
			p["tpot"].(map[string]any)["columns"].([]any)[0] = "gpu_temperature"
		}), nil, nil, "unknown column"},
		{"unknown kind", rechecksum(func(p map[string]any) { p["tpot"].(map[string]any)["kind"] = "neural" }), nil, nil, "kind"},
		{"coefficients short", rechecksum(func(p map[string]any) {
			lin := p["tpot"].(map[string]any)["linear"].(map[string]any)
			lin["coef"] = lin["coef"].([]any)[1:]
		}), nil, nil, "coefficients"},
		{"zero scale", rechecksum(func(p map[string]any) {
			p["tpot"].(map[string]any)["linear"].(map[string]any)["scale"].([]any)[0] = 0.0
		}), nil, nil, "scale"},
		{"ranges missing", rechecksum(func(p map[string]any) { p["tpot"].(map[string]any)["ranges"] = []any{} }), nil, nil, "ranges"},
		{"calibration not monotone", rechecksum(func(p map[string]any) {
			p["tpot"].(map[string]any)["calibration"].(map[string]any)["log_residuals"].([]any)[5] = 3.0
		}), nil, nil, "calibration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.data, tt.key)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
	if _, err := Decode(signed, key); err != nil {
		t.Errorf("correctly signed bundle refused: %v", err)
	}
}

func TestWriteLoadPruneBundles(t *testing.T) {
	dir := t.TempDir()
	b := modeltest.Bundle(t)
	for v := uint64(1); v <= 4; v++ {
		b.Version = v
		data, err := Encode(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Write(dir, v, data); err != nil {
			t.Fatal(err)
		}
	}
	// A corrupt newest bundle is skipped, not served.
	if err := os.WriteFile(Path(dir, 5), []byte(`{"format":"headroom-bundle/1","version":5,"sha256":"00","payload":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A leftover temporary file from a crash mid-write is ignored.
	if err := os.WriteFile(filepath.Join(dir, ".bundle-123.tmp"), []byte("half a bund"), 0o644); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	pub, err := LoadNewest(dir, nil, func(path string, err error) { skipped = append(skipped, path) })
	if err != nil {
		t.Fatal(err)
	}
	if pub == nil || pub.Bundle.Version != 4 || len(skipped) != 1 {
		t.Fatalf("loaded %+v, skipped %v; want version 4 and the corrupt 5 skipped", pub, skipped)
	}
	if err := Prune(dir, 2); err != nil {
		t.Fatal(err)
	}
	vs, _ := Versions(dir)
	if len(vs) != 2 || vs[0] != 5 || vs[1] != 4 {
		t.Errorf("after pruning to 2: versions %v, want [5 4]", vs)
	}
	if pub, err := LoadNewest(t.TempDir(), nil, nil); pub != nil || err != nil {
		t.Errorf("empty dir: %v, %v", pub, err)
	}
}

func TestTreeDump(t *testing.T) {
	b := modeltest.Bundle(t)
	data, _ := Encode(b, nil)
	pub := &Published{Bundle: b, Encoded: data}
	if b.TTFT.Trees == nil {
		t.Fatal("test bundle has no trees")
	}
	d1, err := pub.TreeDump(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	var trees []map[string]any
	if err := json.Unmarshal(d1, &trees); err != nil || len(trees) != b.TTFT.Trees.NumTrees() {
		t.Fatalf("dump: %v, %d trees, want %d", err, len(trees), b.TTFT.Trees.NumTrees())
	}
	if d2, _ := pub.TreeDump(features.TTFT); &d1[0] != &d2[0] {
		t.Error("dump recomputed on the second call")
	}
	if _, err := pub.TreeDump(features.TPOT); err == nil {
		t.Error("dump of a linear model succeeded")
	}
}
func TestBundleCarriesTheTransferModel(t *testing.T) {
	b := modeltest.Bundle(t)
	b.Transfer = modeltest.TransferModel(t)
	data, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Transfer == nil {
		t.Fatal("transfer model lost in the round trip")
	}
	want, _ := b.Transfer.Predict(features.CrossZone, 3000, 0, 2)
	if have, ok := got.Transfer.Predict(features.CrossZone, 3000, 0, 2); !ok || have != want {
		t.Fatalf("decoded model predicts %v (ok %v), the original %v", have, ok, want)
	}

	// A bundle whose transfer model is inconsistent is refused whole.
	b.Transfer.Classes[0].BytesPerSec = -1
	bad, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(bad, nil); err == nil || !strings.Contains(err.Error(), "bandwidth") {
		t.Fatalf("Decode of a bundle with a negative bandwidth: %v", err)
	}

	// A bundle without one (every bundle before this target) still decodes.
	b.Transfer = nil
	old, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(old), "kv_transfer") {
		t.Fatal("a bundle without a transfer model mentions it")
	}
	if got, err := Decode(old, nil); err != nil || got.Transfer != nil {
		t.Fatalf("Decode of a bundle without a transfer model: %v, %v", got, err)
	}
}

// The split-TTFT law travels under split_ttft_v2 with its shared terms; a
// bundle of a trainer before them, whose law is under split_ttft, still
// decodes, its law without shared terms, as it was fitted.
func TestBundleCarriesTheSplitTTFTLaw(t *testing.T) {
	b := modeltest.Bundle(t)
	b.SplitTTFT = modeltest.TransferModel(t)
	b.SplitTTFT.Shared = &model.SharedTerms{Columns: []string{"effective_input_tokens"}, MsPer: []float64{0.04}}
	data, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"split_ttft_v2":`) || strings.Contains(string(data), `"split_ttft":`) {
		t.Fatalf("encoded split-TTFT law under another key: %s", data)
	}
	got, err := Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := &features.Row{InputTokenLength: 1000}
	if got.SplitTTFT == nil || got.SplitTTFT.SharedMs(row, nil) != 40 {
		t.Fatalf("decoded split-TTFT law %+v", got.SplitTTFT)
	}

	b.SplitTTFT.Shared = nil
	payload, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	legacy := strings.Replace(string(payload), `"split_ttft_v2":`, `"split_ttft":`, 1)
	sum := sha256.Sum256([]byte(legacy))
	env, err := json.Marshal(map[string]any{"format": Format, "version": b.Version, "epoch": b.Epoch,
		"sha256": hex.EncodeToString(sum[:]), "payload": json.RawMessage(legacy)})
	if err != nil {
		t.Fatal(err)
	}
	old, err := Decode(env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if old.SplitTTFT == nil || old.SplitTTFT.Shared != nil {
		t.Fatalf("a bundle with its law under split_ttft decodes as %+v", old.SplitTTFT)
	}
	want, _ := b.SplitTTFT.Predict(features.SameRack, 2000, 0, 1)
	if have, ok := old.SplitTTFT.Predict(features.SameRack, 2000, 0, 1); !ok || have != want {
		t.Fatalf("the old law predicts %v (%v), as fitted %v", have, ok, want)
	}
}

// A selection travels in the bundle, and one that does not validate makes
// the bundle unreadable rather than show a choice that was not made.
func TestSelectionInBundle(t *testing.T) {
	b := modeltest.Bundle(t)
	b.TTFT.Selection = &model.Selection{Chosen: "line", Reason: "first", At: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC),
		TrainRows: 1000, FitRows: 600, ScoreRows: 400, Candidates: []model.CandidateScore{
			{Name: "configured", Kind: model.KindResidual, MAPE: 10.5}, {Name: "line", Kind: model.KindLinear, MAPE: 9.8}}}
	data, err := Encode(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.TTFT.Selection, b.TTFT.Selection) || got.TPOT.Selection != nil {
		t.Errorf("decoded selections %+v, %+v", got.TTFT.Selection, got.TPOT.Selection)
	}
	b.TTFT.Selection.Chosen = "nowhere"
	if data, err = Encode(b, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(data, nil); err == nil {
		t.Error("decoded a bundle whose selection names no scored candidate")
	}
}

// A predictor without a bundle reports no transfer model on /status.
func TestNoBundleNoTransferStatus(t *testing.T) {
	if b, err := json.Marshal((*Published)(nil).TransferStatus()); err != nil || string(b) != `{"ready":false}` {
		t.Errorf("no bundle: %s, %v", b, err)
	}
}
