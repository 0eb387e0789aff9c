package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/store"
)

// A ledger gives every training entry a test sends a unique id (carried as
// input_token_length, which the store keeps exactly), remembers what the
// trainer said about it, and at the end checks the store against that:
//
//   - acknowledged (202, and counted as accepted): must be stored, exactly
//     as sent, under each target it has a label for;
//   - refused (an HTTP answer other than 202, rejected by index in a 202,
//     or a connection refused): must not be stored;
//   - unknown (no answer: the trainer died or the connection broke): may
//     be stored or not, but not half, and not changed.
//
// Anything else in the store is a sample that was never sent.
type ledger struct {
	mu    sync.Mutex
	next  int64
	state map[int64]entryState
}

type entryState uint8

const (
	stateUnknown      entryState = iota
	stateAcked                   // 202, counted as accepted
	stateRejected                // 202, reported in "rejected" by index
	stateRefused                 // an HTTP answer other than 202
	stateNotDelivered            // connection refused
)

func newLedger() *ledger { return &ledger{next: 1, state: map[int64]entryState{}} }

// ledgerEpoch anchors the timestamps entries carry, so a stored sample can
// be compared field by field with what was sent.
var ledgerEpoch = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

// ledgerSample is the sample entry id describes. Ids cycle through TTFT-only,
// TPOT-only and both labels, and through every store bucket.
func ledgerSample(id int64) features.Sample {
	s := features.Sample{
		Row: features.Row{
			KVCachePercentage:     float64(id%100) / 100,
			InputTokenLength:      id,
			NumRequestWaiting:     id % 7,
			NumRequestRunning:     id % 13,
			PrefixCacheScore:      float64(id%5) / 4,
			PrefillTokensInFlight: id % 1000,
		},
		Timestamp: ledgerEpoch.Add(time.Duration(id) * time.Millisecond),
	}
	// Labels follow a plausible shape, so a trainer fed them learns a line.
	if id%3 != 2 {
		s.ActualTTFTMs = 20 + float64(id%13)*3 + float64(id%1000)/100
	}
	if id%3 != 1 {
		s.ActualTPOTMs = 5 + float64(id%13)*0.4 + float64(id%100)/1000
	}
	return s
}

func ledgerEntryJSON(id int64, invalid bool) string {
	s := ledgerSample(id)
	kv := fmt.Sprint(s.Row.KVCachePercentage)
	if invalid {
		kv = "1.5" // outside [0, 1]: refused by validation, with its index
	}
	return fmt.Sprintf(`{"kv_cache_percentage":%s,"input_token_length":%d,"num_request_waiting":%d,`+
		`"num_request_running":%d,"num_tokens_generated":0,"prefix_cache_score":%v,"prefill_tokens_in_flight":%d,`+
		`"actual_ttft_ms":%v,"actual_tpot_ms":%v,"timestamp":%q}`,
		kv, id, s.Row.NumRequestWaiting, s.Row.NumRequestRunning, s.Row.PrefixCacheScore,
		s.Row.PrefillTokensInFlight, s.ActualTTFTMs, s.ActualTPOTMs, s.Timestamp.Format(time.RFC3339Nano))
}

// batch is one request's worth of new entries.
type batch struct {
	ids     []int64
	invalid map[int]bool // by index in ids
	body    []byte
}

// newBatch makes n new entries; every invalidEvery-th (if > 0) is invalid.
func (l *ledger) newBatch(n, invalidEvery int) *batch {
	l.mu.Lock()
	first := l.next
	l.next += int64(n)
	for id := first; id < l.next; id++ {
		l.state[id] = stateUnknown
	}
	l.mu.Unlock()
	b := &batch{invalid: map[int]bool{}}
	parts := make([]string, n)
	for i := range n {
		id := first + int64(i)
		bad := invalidEvery > 0 && i%invalidEvery == invalidEvery-1
		if bad {
			b.invalid[i] = true
		}
		b.ids = append(b.ids, id)
		parts[i] = ledgerEntryJSON(id, bad)
	}
	b.body = []byte(`{"entries":[` + strings.Join(parts, ",") + `]}`)
	return b
}

// ingestAnswer is the part of a 202 the ledger checks.
type ingestAnswer struct {
	Accepted int `json:"accepted"`
	Rejected []struct {
		Index int `json:"index"`
	} `json:"rejected"`
}

// statusNotDelivered records a request the trainer cannot have seen (the
// connection was refused).
const statusNotDelivered = -1

// record notes the trainer's answer to b: status 0 means no answer. A 202
// whose counts disagree with what was sent is an error.
func (l *ledger) record(b *batch, status int, body []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case status == 0:
		return nil // unknown, as created
	case status == statusNotDelivered:
		for _, id := range b.ids {
			l.state[id] = stateNotDelivered
		}
		return nil
	case status != http.StatusAccepted:
		for _, id := range b.ids {
			l.state[id] = stateRefused
		}
		return nil
	}
	var a ingestAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("202 body %q: %v", body, err)
	}
	rejected := map[int]bool{}
	for _, r := range a.Rejected {
		rejected[r.Index] = true
	}
	if a.Accepted != len(b.ids)-len(b.invalid) || len(rejected) != len(b.invalid) {
		return fmt.Errorf("202 accepted %d and rejected %d of %d entries with %d invalid: %s",
			a.Accepted, len(rejected), len(b.ids), len(b.invalid), body)
	}
	for i, id := range b.ids {
		switch {
		case b.invalid[i] != rejected[i]:
			return fmt.Errorf("entry %d (invalid=%v) rejected=%v", i, b.invalid[i], rejected[i])
		case b.invalid[i]:
			l.state[id] = stateRejected
		default:
			l.state[id] = stateAcked
		}
	}
	return nil
}

// post sends b to url and records the answer. It returns the status (0 when
// no answer came) and any protocol error.
func (l *ledger) post(ctx context.Context, client *http.Client, url string, b *batch) (int, error) {
	status, body, err := httpDo(ctx, client, "POST", url+"/add_training_data_bulk", b.body)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		// Never delivered: it cannot have been stored.
		return 0, l.record(b, statusNotDelivered, nil)
	case err != nil:
		status = 0
	}
	return status, l.record(b, status, body)
}

// ledgerCounts summarises a check.
type ledgerCounts struct {
	Sent, Acked, Unknown int
	Rejected             int // invalid entries reported by index in a 202
	Refused              int // entries of requests answered with another status
	NotDelivered         int // entries of requests whose connection was refused
	AckedFound           int // acknowledged entries found, all of them when the check passes
	UnknownFound         int // unanswered entries that were stored nonetheless
	StoredSamples        int // per-target records in the store
}

// check opens the store at path (the process that wrote it must be gone)
// and compares it with the ledger, reporting every discrepancy.
func (l *ledger) check(t *testing.T, path string, opts store.Options) ledgerCounts {
	t.Helper()
	db, err := store.Open(path, opts)
	if err != nil {
		t.Fatalf("reopen store after the test: %v", err)
	}
	defer db.Close()
	if r := db.OpenReport(); r.Dropped != (store.OpenReport{}).Dropped || r.FromScheme != "" {
		t.Fatalf("reopening changed the store (%+v): check options differ from the trainer's", r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var c ledgerCounts
	found := map[int64]int{} // id -> targets it was found under
	for _, tg := range features.PodTargets {
		train, holdout, err := db.Snapshot(tg)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for _, got := range append(train, holdout...) {
			c.StoredSamples++
			id := got.Row.InputTokenLength
			st, sent := l.state[id]
			switch {
			case !sent:
				t.Errorf("%s: stored sample with id %d was never sent: %+v", tg, id, got)
				continue
			case st == stateRejected || st == stateRefused || st == stateNotDelivered:
				t.Errorf("%s: sample %d is stored although it was rejected, refused or never delivered (state %d)", tg, id, st)
			case seen[id]:
				t.Errorf("%s: sample %d is stored twice", tg, id)
			}
			seen[id] = true
			want := ledgerSample(id)
			if _, ok := want.Label(tg); !ok {
				t.Errorf("%s: sample %d has no %s label but is stored under it", tg, id, tg)
			}
			if got.Row != want.Row || got.ActualTTFTMs != want.ActualTTFTMs || got.ActualTPOTMs != want.ActualTPOTMs ||
				!got.Timestamp.Equal(want.Timestamp) {
				t.Errorf("%s: sample %d changed:\n got  %+v\n want %+v", tg, id, got, want)
			}
			found[id]++
		}
	}
	for id, st := range l.state {
		c.Sent++
		want := ledgerSample(id)
		labels := 0
		for _, tg := range features.PodTargets {
			if _, ok := want.Label(tg); ok {
				labels++
			}
		}
		switch st {
		case stateAcked:
			c.Acked++
			if found[id] == labels {
				c.AckedFound++
			} else {
				t.Errorf("acknowledged sample %d found under %d of its %d targets", id, found[id], labels)
			}
		case stateRejected:
			c.Rejected++
		case stateRefused:
			c.Refused++
		case stateNotDelivered:
			c.NotDelivered++
		case stateUnknown:
			c.Unknown++
			if found[id] > 0 {
				c.UnknownFound++
				if found[id] != labels {
					t.Errorf("unanswered sample %d stored under %d of its %d targets: half a sample", id, found[id], labels)
				}
			}
		}
	}
	return c
}
