package api

import (
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// ingestPD stores n disaggregated samples: each has a TTFT label and a
// measured KV transfer, so it is in the TTFT and the KV-transfer streams.
func (s *service) ingestPD(t *testing.T, n int) {
	t.Helper()
	var es []string
	for i := range n {
		es = append(es, pdEntry(100+i*50, i%2 == 1))
	}
	if w := do(s.trainerH, "POST", "/samples", `{"entries":[`+strings.Join(es, ",")+`]}`); w.Code != 202 {
		t.Fatalf("ingest: %d %s", w.Code, w.Body)
	}
}

// /data/status counts every stream of the store, KV transfers included,
// and its totals are the sums over them.
func TestDataStatusCountsEveryStream(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestPD(t, 50)
	st := decode(t, do(s.trainerH, "GET", "/data/status", ""))
	counts := s.db.Counts()
	for side, get := range map[string]func(features.Target) int{"training_data": counts.Train, "test_data": counts.Holdout} {
		got, _ := st[side].(map[string]any)
		total := 0
		for _, tg := range features.Targets {
			total += get(tg)
			if n, ok := got[tg.String()+"_samples"].(float64); !ok || int(n) != get(tg) {
				t.Errorf("%s.%s_samples = %v, want %d", side, tg, got[tg.String()+"_samples"], get(tg))
			}
		}
		if n, _ := got["total_samples"].(float64); int(n) != total {
			t.Errorf("%s.total_samples = %v, want %d", side, got["total_samples"], total)
		}
	}
	if kv := counts.Train(features.KVTransfer) + counts.Holdout(features.KVTransfer); kv != 50 {
		t.Fatalf("%d KV-transfer samples stored, want 50", kv)
	}
	train, _ := st["training_data"].(map[string]any)
	test, _ := st["test_data"].(map[string]any)
	if n, _ := train["kv_transfer_samples"].(float64); int(n) != counts.Train(features.KVTransfer) {
		t.Errorf("training_data.kv_transfer_samples = %v, want %d", train["kv_transfer_samples"], counts.Train(features.KVTransfer))
	}
	if n, _ := test["kv_transfer_samples"].(float64); int(n) != counts.Holdout(features.KVTransfer) {
		t.Errorf("test_data.kv_transfer_samples = %v, want %d", test["kv_transfer_samples"], counts.Holdout(features.KVTransfer))
	}
	if _, ok := st["kv_transfer_bucket_distribution"].(map[string]any); !ok {
		t.Errorf("no kv_transfer_bucket_distribution in %v", st)
	}
}

// POST /flush deletes every stream, KV transfers included, and says how
// many of each it deleted.
func TestFlushDeletesEveryStream(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestPD(t, 50)
	before := s.db.Counts()
	if kv := before.Train(features.KVTransfer) + before.Holdout(features.KVTransfer); kv != 50 {
		t.Fatalf("%d KV-transfer samples before the flush, want 50", kv)
	}
	w := do(s.trainerH, "POST", "/flush", `{"confirm": true}`)
	if w.Code != 200 {
		t.Fatalf("flush: %d %s", w.Code, w.Body)
	}
	res := decode(t, w)
	after := s.db.Counts()
	for _, tg := range features.Targets {
		if after.Train(tg) != 0 || after.Holdout(tg) != 0 {
			t.Errorf("%s: %d training and %d held-out samples after the flush, want none", tg, after.Train(tg), after.Holdout(tg))
		}
		for key, want := range map[string]int{
			tg.String() + "_training_samples_flushed": before.Train(tg),
			tg.String() + "_test_samples_flushed":     before.Holdout(tg),
		} {
			if n, ok := res[key].(float64); !ok || int(n) != want {
				t.Errorf("%s = %v, want %d", key, res[key], want)
			}
		}
	}
	if kv := after.Train(features.KVTransfer) + after.Holdout(features.KVTransfer); kv != 0 {
		t.Errorf("%d KV-transfer samples after the flush, want none", kv)
	}
	if msg, _ := res["message"].(string); !strings.Contains(msg, "KV-transfer") {
		t.Errorf("message %q does not say the KV transfers were flushed", msg)
	}
}
