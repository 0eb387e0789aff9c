package wire

import (
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/orderedjson"
)

// TargetCount is one target's count of samples in a store.
type TargetCount struct {
	Target features.Target
	N      int
}

// SampleCounts are one side's sample counts (training or held out), one per
// target in the order of features.Targets; they encode as the reference's
// {"ttft_samples", "tpot_samples", "total_samples"}, with a
// "<target>_samples" for every target before the total of them all.
type SampleCounts []TargetCount

// MarshalJSON implements json.Marshaler.
func (c SampleCounts) MarshalJSON() ([]byte, error) {
	o := make(orderedjson.Object, 0, len(c)+1)
	total := 0
	for _, n := range c {
		o = append(o, orderedjson.Field{Key: n.Target.String() + "_samples", Value: n.N})
		total += n.N
	}
	return append(o, orderedjson.Field{Key: "total_samples", Value: total}).MarshalJSON()
}

// TargetBuckets is one target's non-empty training buckets and their
// sample counts.
type TargetBuckets struct {
	Target  features.Target
	Buckets map[string]int
}

// DataStatus is the answer of the trainer's GET /data/status
// (docs/PROTOCOL.md §5.5): the reference's fields, for every target.
type DataStatus struct {
	Training, Test SampleCounts
	// Buckets are every target's, in the order of features.Targets: TTFT's
	// under the reference's "bucket_distribution", each other's under
	// "<target>_bucket_distribution".
	Buckets    []TargetBuckets
	ModelReady bool
	// LastRetrain is the newest successful retrain, RFC 3339, or nil
	// before the first.
	LastRetrain any
}

// MarshalJSON implements json.Marshaler. The reference's ensemble and
// score fields, which Headroom has no use for, keep their constant values.
func (s DataStatus) MarshalJSON() ([]byte, error) {
	o := orderedjson.Object{
		{Key: "training_data", Value: s.Training},
		{Key: "test_data", Value: s.Test},
		{Key: "ensemble", Value: orderedjson.Object{{Key: "ensemble_mode", Value: false}, {Key: "ensemble_active", Value: false},
			{Key: "min_samples_for_split", Value: 0}, {Key: "ttft_noqueue_samples", Value: 0}, {Key: "ttft_queued_samples", Value: 0},
			{Key: "tpot_noqueue_samples", Value: 0}, {Key: "tpot_queued_samples", Value: 0}}},
		{Key: "metrics", Value: orderedjson.Object{{Key: "ttft_scores_count", Value: 0}, {Key: "tpot_scores_count", Value: 0}}},
	}
	for _, b := range s.Buckets {
		key := b.Target.String() + "_bucket_distribution"
		if b.Target == features.TTFT {
			key = "bucket_distribution"
		}
		buckets := b.Buckets
		if buckets == nil {
			buckets = map[string]int{}
		}
		o = append(o, orderedjson.Field{Key: key, Value: buckets})
	}
	o = append(o, orderedjson.Field{Key: "model_ready", Value: s.ModelReady}, orderedjson.Field{Key: "last_retrain", Value: s.LastRetrain})
	return o.MarshalJSON()
}
