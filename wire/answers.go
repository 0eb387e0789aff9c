package wire

import "github.com/headroomhq/headroom/model"

// The answers of the routes that neither predict nor take samples, each
// with the reference's field names and Headroom's additions
// (docs/PROTOCOL.md §4 and §5). A field kind is written once: the
// statistic a server serves is Serving in every answer that reports it,
// timestamps are Timestamp's.

// Serving is the statistic a server's predictions are (a mean, or a
// quantile): part of every answer that reports it.
type Serving struct {
	ModelType     string  `json:"model_type"` // always ModelType
	ObjectiveType string  `json:"objective_type"`
	Quantile      float64 `json:"quantile"`
}

// NewServing is the answer's Serving of a server serving objective at
// quantile q.
func NewServing(objective string, q float64) Serving {
	return Serving{ModelType: ModelType, ObjectiveType: objective, Quantile: q}
}

// Detail is an error answer, the reference's: {"detail": "<message>"}, or
// 422 {"detail": [FieldError, ...]}; an ingest none of whose entries was
// accepted also lists them (Rejected).
type Detail struct {
	Detail   any         `json:"detail"`
	Rejected []Rejection `json:"rejected,omitempty"`
}

// Health is GET /healthz: {"status": "ok"}, the predictor's naming its
// service as the reference's does.
type Health struct {
	Status  string `json:"status"`
	Service string `json:"service,omitempty"`
}

// TrainerReadiness is the trainer's GET /readyz: ready from its first
// second, and whether it has a model yet.
type TrainerReadiness struct {
	Status     string `json:"status"`
	ModelReady bool   `json:"model_ready"`
}

// PredictorReadiness is the predictor's GET /readyz once it has models.
type PredictorReadiness struct {
	Status string `json:"status"`
	Serving
}

// Stored counts what one ingest stored, per stream of the store in the
// order of features.Targets (store.AddResult).
type Stored struct {
	Train   []int `json:"Train"`
	Holdout []int `json:"Holdout"`
	// HoldoutOverflow counts the held-out side's samples that their
	// minute of arrival had no room for in the holdout: in Train instead.
	HoldoutOverflow []int `json:"HoldoutOverflow"`
	Evicted         []int `json:"Evicted"`
	Discarded       int   `json:"Discarded"`
	// Duplicates counts entries identical to a sample the store holds,
	// acknowledged and not stored again.
	Duplicates int `json:"Duplicates"`
}

// IngestAnswer is 202 to POST /samples and /add_training_data_bulk: how
// many entries were accepted, which were refused and why, and what the
// store did with the accepted ones.
type IngestAnswer struct {
	Message  string      `json:"message"`
	Accepted int         `json:"accepted"`
	Rejected []Rejection `json:"rejected"` // never null
	Stored   Stored      `json:"stored"`
}

// TargetSamples are one stream's stored samples, training and held out.
type TargetSamples struct {
	Train   int `json:"train"`
	Holdout int `json:"holdout"`
}

// TrainerStatus is the trainer's GET /status.
type TrainerStatus struct {
	IsReady bool `json:"is_ready"`
	Serving
	ModelGeneration  uint64 `json:"model_generation"`
	BundleEpoch      string `json:"bundle_epoch"`
	XGBoostAvailable bool   `json:"xgboost_available"`
	XGBoostError     string `json:"xgboost_error"`
	// Training is the trainer's status of each target (trainer.Status's
	// Targets), Samples each target's stream, both under the target's name.
	Training   any                      `json:"training"`
	Samples    map[string]TargetSamples `json:"samples"`
	KVTransfer model.TransferStatus     `json:"kv_transfer"`
	SplitTTFT  model.TransferStatus     `json:"split_ttft"`
}

// PredictorStatus is the predictor's GET /status.
type PredictorStatus struct {
	IsReady bool `json:"is_ready"`
	Serving
	LastModelLoad     any    `json:"last_model_load"` // RFC 3339 or null
	TrainingServerURL string `json:"training_server_url"`
	// ModelsExist has a "<target>_model" for every target.
	ModelsExist     map[string]bool      `json:"models_exist"`
	KVTransfer      model.TransferStatus `json:"kv_transfer"`
	SplitTTFT       model.TransferStatus `json:"split_ttft"`
	EnsembleActive  bool                 `json:"ensemble_active"` // always false
	ModelGeneration uint64               `json:"model_generation"`
	Trained         bool                 `json:"trained"`
	*LoadedBundle
}

// LoadedBundle is what a predictor's /status says of the bundle in
// service, once there is one.
type LoadedBundle struct {
	AgeSeconds  float64 `json:"bundle_age_seconds"`
	Checksum    string  `json:"bundle_checksum"`
	Epoch       string  `json:"bundle_epoch"`
	SamplesSeen int     `json:"samples_seen"`
}

// ReloadAnswer is the predictor's POST /reload.
type ReloadAnswer struct {
	Synced  bool `json:"synced"`
	Loaded  bool `json:"loaded"`
	IsReady bool `json:"is_ready"`
	Serving
	LastLoadTime any `json:"last_load_time"` // RFC 3339 or null
}

// TrainerRoot is the trainer's GET / for a client that is not a browser.
type TrainerRoot struct {
	Message string `json:"message"`
	Serving
	Description string `json:"description"`
}

// PredictorRoot is the predictor's GET / for a client that is not a
// browser.
type PredictorRoot struct {
	Message string `json:"message"`
	Serving
	IsReady        bool   `json:"is_ready"`
	SyncInterval   int    `json:"sync_interval"` // seconds
	TrainingServer string `json:"training_server"`
}

// DownloadInfo is the trainer's GET /model/download/info. ModelStatus has
// a "<target>_model_ready" for every target, Endpoints.Trees a
// "<target>_trees" for every target with trees.
type DownloadInfo struct {
	Serving
	ModelStatus    map[string]bool `json:"model_status"`
	Endpoints      Endpoints       `json:"available_endpoints"`
	EvaluationInfo EvaluationInfo  `json:"evaluation_info"`
}

// Endpoints are the trainer's routes of a DownloadInfo.
type Endpoints struct {
	Trees  map[string]string `json:"trees"`
	Bundle string            `json:"bundle"`
	Info   string            `json:"info"`
}

// EvaluationInfo is the reference's legend of the figures a DownloadInfo
// points to.
type EvaluationInfo struct {
	QuantileLoss         string `json:"quantile_loss"`
	CoveragePercent      string `json:"coverage_percent"`
	ViolationRatePercent string `json:"violation_rate_percent"`
	MAPEPercent          string `json:"mape_percent"`
}

// BulkRowError is one row of a bulk prediction that could not be made.
type BulkRowError struct {
	Index   int    `json:"index"`
	Error   string `json:"error"`
	Request any    `json:"request"` // the row as it was asked (RowObject)
}

// BulkNotReady is POST /predict/bulk before the predictor has models: the
// reference's 200 with every row failed.
type BulkNotReady struct {
	Predictions      []any          `json:"predictions"` // one null per row
	Errors           []BulkRowError `json:"errors"`
	TotalRequests    int            `json:"total_requests"`
	Successful       int            `json:"successful_predictions"`
	Failed           int            `json:"failed_predictions"`
	ProcessingTimeMs float64        `json:"processing_time_ms"`
}
