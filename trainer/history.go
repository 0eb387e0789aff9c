package trainer

import (
	"sync"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// HistoryCapacity is how many training runs History keeps: an hour of two
// targets retraining at the default 10 s interval, a few tens of KB.
const HistoryCapacity = 720

// RetrainRecord is one target's training run, kept for the dashboard's
// plots of error and training time over time.
type RetrainRecord struct {
	Target   features.Target
	Start    time.Time
	Duration time.Duration
	// Err is the run's error; a run can fail and still return a linear
	// model (Fitted set).
	Err string
	// Of the new model, when there is one (Fitted): its kind (none for a
	// model without kinds, the KV-transfer law), training rows, and
	// holdout MAPE with and without its trees.
	Fitted      bool
	Kind        model.Kind
	TrainRows   int
	HoldoutMAPE float64
	LinearMAPE  float64
	// LiveMAPE is the live MAPE of the model in service when the run
	// started, over the live window; HasLive is false before any arrived.
	LiveMAPE float64
	HasLive  bool
}

// history is a fixed ring of the newest RetrainRecords. Runs happen every
// few seconds at most, off the ingest and prediction paths, so a mutex is
// plenty.
type history struct {
	mu   sync.Mutex
	recs []RetrainRecord // ring of HistoryCapacity, next is the oldest once full
	next int
}

func (h *history) add(r RetrainRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.recs) < HistoryCapacity {
		h.recs = append(h.recs, r)
		return
	}
	h.recs[h.next] = r
	h.next = (h.next + 1) % HistoryCapacity
}

// list returns the records oldest first.
func (h *history) list() []RetrainRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]RetrainRecord, 0, len(h.recs))
	out = append(out, h.recs[h.next:]...)
	return append(out, h.recs[:h.next]...)
}

// History returns the newest training runs of every target, oldest first,
// at most HistoryCapacity of them.
func (t *Trainer) History() []RetrainRecord { return t.history.list() }
