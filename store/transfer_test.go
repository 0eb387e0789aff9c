package store

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/headroomhq/headroom/features"
)

// transferSamples are n disaggregated requests across every link class and
// transfer sizes from 1 to 30,000 tokens; every third also has a TTFT label
// (with the transfer subtracted it is still positive), the rest carry only
// the transfer.
func transferSamples(n int, seed uint64) []features.Sample {
	rng := rand.New(rand.NewPCG(seed, 11))
	places := []features.Topology{
		{Node: "n0", Rack: "r0", Zone: "a", Region: "eu"}, {Node: "n1", Rack: "r0", Zone: "a", Region: "eu"},
		{Node: "n2", Rack: "r1", Zone: "a", Region: "eu"}, {Node: "n3", Rack: "r0", Zone: "b", Region: "eu"},
		{Node: "n4", Rack: "r0", Zone: "a", Region: "us"},
	}
	out := make([]features.Sample, n)
	for i := range out {
		tokens := int64(1 + rng.IntN(30000))
		d := places[rng.IntN(len(places))]
		out[i] = features.Sample{
			Row:       features.Row{InputTokenLength: tokens + rng.Int64N(100), PodType: "decode"},
			Timestamp: testEpoch.Add(time.Duration(i) * time.Microsecond),
			Transfer: &features.Transfer{Ms: 0.1 + rng.Float64()*50, Tokens: tokens, BytesPerToken: 163840,
				PrefillPod: fmt.Sprint("p-", i%7), DecodePod: "d-" + d.Node, Prefill: places[0], Decode: d,
				Concurrent: rng.Int64N(4)},
		}
		if i%3 == 0 {
			out[i].ActualTTFTMs = out[i].Transfer.Ms + 100
		}
	}
	return out
}

func TestTransferStream(t *testing.T) {
	path := tempPath(t)
	db := openTest(t, path, testOptions())
	samples := transferSamples(3000, 1)
	res := mustAdd(t, db, samples)
	kv := features.KVTransfer
	if got := res.Train[kv] + res.Holdout[kv]; got != len(samples) {
		t.Fatalf("%d of %d transfer samples stored", got, len(samples))
	}
	if res.Train[features.TTFT]+res.Holdout[features.TTFT] != 1000 || res.Discarded != 0 {
		t.Fatalf("result %+v: want the 1,000 with a TTFT in that stream too, none discarded", res)
	}
	// About 10% held out (binomial: 300 ± 3σ ≈ ±50).
	if h := res.Holdout[kv]; h < 250 || h > 350 {
		t.Errorf("%d of 3000 transfer samples held out, want about 300", h)
	}
	// Stratified by link class × size: every class and band present, none
	// holding everything.
	buckets := db.BucketCounts(kv)
	if len(buckets) != transferScheme.NumBuckets() {
		t.Errorf("transfer samples fill %d buckets, want all %d: %v", len(buckets), transferScheme.NumBuckets(), buckets)
	}
	for _, s := range samples[:50] {
		key := transferScheme.keys[transferIndex(&s)]
		wantClass := fmt.Sprintf("link_%d_", s.Transfer.Class())
		if key[:len(wantClass)] != wantClass {
			t.Fatalf("%s transfer of %d tokens in bucket %s", s.Transfer.Class(), s.Transfer.Tokens, key)
		}
	}

	// Everything survives a restart, transfer fields included.
	train, holdout, err := db.Snapshot(kv)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openTest(t, path, testOptions())
	train2, holdout2, err := db.Snapshot(kv)
	if err != nil {
		t.Fatal(err)
	}
	if !samplesEqual(train, train2) || !samplesEqual(holdout, holdout2) || len(train)+len(holdout) != len(samples) {
		t.Fatalf("after restart %d+%d transfer samples, before %d+%d", len(train2), len(holdout2), len(train), len(holdout))
	}
	for _, s := range append(train2, holdout2...) {
		if s.Transfer == nil || s.Transfer.Ms <= 0 || s.Transfer.Decode.Node == "" {
			t.Fatalf("transfer sample read back without its transfer: %+v", s)
		}
	}

	// Flushing everything empties the stream; flushing TTFT alone does not.
	if _, err := db.Flush(true, true, features.TTFT); err != nil {
		t.Fatal(err)
	}
	if c := db.Counts(); c.Train(kv)+c.Holdout(kv) != len(samples) {
		t.Fatalf("a TTFT flush took transfer samples: %d left", c.Train(kv)+c.Holdout(kv))
	}
	gen := db.Generation(kv)
	if _, err := db.Flush(true, true); err != nil {
		t.Fatal(err)
	}
	if c := db.Counts(); c.Train(kv)+c.Holdout(kv) != 0 || db.Generation(kv) <= gen {
		t.Fatalf("after a full flush %d transfer samples, generation %d → %d", c.Train(kv)+c.Holdout(kv), gen, db.Generation(kv))
	}
}

// A store written before the transfer stream existed (format 1: no
// kv_transfer bucket, no generation for it) opens with every sample, gains
// the stream, and takes transfer samples.
func TestOpenUpgradesFormat1(t *testing.T) {
	path := tempPath(t)
	makeStore(t, path, 2000)
	before := openTest(t, path, testOptions())
	wantTrain, wantHoldout, err := before.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	wantGen := before.Generation(features.TTFT)
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteAsFormat(t, path, 1)

	db := openTest(t, path, testOptions())
	train, holdout, err := db.Snapshot(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	if !samplesEqual(train, wantTrain) || !samplesEqual(holdout, wantHoldout) || db.Generation(features.TTFT) != wantGen {
		t.Fatalf("upgrade changed the TTFT samples: %d+%d, want %d+%d", len(train), len(holdout), len(wantTrain), len(wantHoldout))
	}
	res := mustAdd(t, db, transferSamples(100, 2))
	if res.Train[features.KVTransfer]+res.Holdout[features.KVTransfer] != 100 {
		t.Fatalf("upgraded store took %+v of 100 transfer samples", res)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if format := fileFormat(t, path); format != formatVersion {
		t.Fatalf("format %d after the upgrade, want %d", format, formatVersion)
	}
	db = openTest(t, path, testOptions())
	if c := db.Counts(); c.Train(features.KVTransfer)+c.Holdout(features.KVTransfer) != 100 {
		t.Fatalf("after reopening %d transfer samples, want 100", c.Train(features.KVTransfer)+c.Holdout(features.KVTransfer))
	}
}

// A store written before the split-TTFT stream existed (format 2: no
// split_ttft bucket, no generation for it) opens with every sample, gains
// the stream (format 3), and takes split requests' TTFTs into it.
func TestOpenUpgradesFormat2(t *testing.T) {
	path := tempPath(t)
	before := openTest(t, path, testOptions())
	mustAdd(t, before, transferSamples(300, 4))
	want := before.Counts()
	if want.Train(features.SplitTTFT)+want.Holdout(features.SplitTTFT) == 0 {
		t.Fatal("no split-TTFT samples among transfers with TTFTs")
	}
	if err := before.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteAsFormat(t, path, 2)
	db := openTest(t, path, testOptions())
	got := db.Counts()
	for _, tg := range []features.Target{features.TTFT, features.KVTransfer} {
		if got.Train(tg) != want.Train(tg) || got.Holdout(tg) != want.Holdout(tg) {
			t.Errorf("%s: %d+%d after the upgrade, want %d+%d", tg, got.Train(tg), got.Holdout(tg), want.Train(tg), want.Holdout(tg))
		}
	}
	if n := got.Train(features.SplitTTFT) + got.Holdout(features.SplitTTFT); n != 0 {
		t.Errorf("%d split-TTFT samples in the stream the upgrade added", n)
	}
	res := mustAdd(t, db, transferSamples(300, 5))
	if res.Train[features.SplitTTFT]+res.Holdout[features.SplitTTFT] == 0 {
		t.Fatalf("upgraded store took %+v", res)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if format := fileFormat(t, path); format != formatVersion {
		t.Fatalf("format %d after the upgrade, want %d", format, formatVersion)
	}
}

// fileFormat is the format version the closed store at path records.
func fileFormat(t *testing.T, path string) uint64 {
	t.Helper()
	var format uint64
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.View(func(tx *bolt.Tx) error {
		format, _ = getUint64(tx.Bucket(bucketMeta), keyFormat)
		return nil
	})
	b.Close()
	return format
}
