package trainer

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/headroomhq/headroom/store"
)

// BenchmarkObserveServed is the trainer's part of one ingest of 1,000
// samples (the api calls ObserveServed after each store commit): every
// target scores them against its model in service, moves its quantile
// levels and keeps them for its gate.
func BenchmarkObserveServed(b *testing.B) {
	db, err := store.Open(filepath.Join(b.TempDir(), "samples.db"), store.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	tr, err := New(Config{}, db) // linear models
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	if _, err := db.Add(syntheticSamples(rng, 2000)); err != nil {
		b.Fatal(err)
	}
	if pub, err := tr.Retrain(b.Context()); err != nil || pub == nil {
		b.Fatalf("first bundle: %v, %v", pub, err)
	}
	batch := syntheticSamples(rng, 1000)
	for b.Loop() {
		tr.ObserveServed(batch)
	}
}
