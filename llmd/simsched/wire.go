package simsched

// The wire types of the scheduling server: JSON over HTTP, the simulator
// the client. The simulator's side (lab/demo in Headroom's main module)
// has its own copy of them; neither module imports the other.

// CreateRequest asks for a router: one of the server's configs, loaded
// into llm-d's scheduler afresh (empty prefix index, nothing in flight).
type CreateRequest struct {
	// Config names one of the server's EndpointPickerConfigs.
	Config string `json:"config"`
	// Producer parameters are merged into every headroom-pairs-producer of
	// the config (predictorURL, trainerURL, streamingMode, …); a config
	// without one refuses them.
	Producer map[string]any `json:"producer,omitempty"`
	// PrefixIndex parameters are merged into every
	// approx-prefix-cache-producer of the config: the index sized to the
	// simulated pods' KV cache (lruCapacityPerServer, blockSizeTokens,
	// autoTune), as a deployment sizes it to its own.
	PrefixIndex map[string]any `json:"prefix_index,omitempty"`
	// Seed seeds the router's tie breaks between endpoints of equal score
	// (picker.go): two routers of one config and seed given the same calls
	// pick alike.
	Seed uint64 `json:"seed,omitempty"`
}

// CreateAnswer names the router made.
type CreateAnswer struct {
	ID string `json:"id"`
}

// ScheduleRequest is one request to schedule at simulated time NowNs, after
// the events that came before it.
type ScheduleRequest struct {
	Events    []Event    `json:"events,omitempty"`
	NowNs     int64      `json:"now_ns"`
	Request   Request    `json:"request"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Request is what the scheduler reads of a request: its ID, its prompt as
// a chain of block hashes (Tokens makes token IDs of it, so that llm-d's
// own prefix producer sees shared prefixes as shared), and its headers.
type Request struct {
	ID           string            `json:"id"`
	PromptTokens int               `json:"prompt_tokens"`
	BlockSize    int               `json:"block_size"`
	BlockHashes  []uint64          `json:"block_hashes,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
}

// Endpoint is one candidate as the EPP's data layer knows it: its name,
// its role label, its scraped gauges and its topology (the
// topology-extractor's attribute).
type Endpoint struct {
	Name     string   `json:"name"`
	Role     string   `json:"role"`
	Topology Topology `json:"topology"`
	Waiting  int      `json:"waiting"`
	Running  int      `json:"running"`
	KVCache  float64  `json:"kv_cache"`
}

// Topology is an endpoint's placement.
type Topology struct {
	Node   string `json:"node"`
	Rack   string `json:"rack,omitempty"`
	Zone   string `json:"zone,omitempty"`
	Region string `json:"region,omitempty"`
}

// ScheduleAnswer is llm-d's pick: the decode pod, and the prefill pod when
// the disagg profile handler split the request.
type ScheduleAnswer struct {
	Decode  string `json:"decode"`
	Prefill string `json:"prefill,omitempty"`
}

// The kinds of Event.
const (
	// FirstToken: the response's headers and its first chunk reached the
	// EPP; TransferMs is the KV transfer the sidecar reports in a header,
	// 0 when it reports none.
	FirstToken = "first_token"
	// End: the last chunk; OutputTokens chunks were streamed in all (one
	// per token), the first at FirstToken.
	End = "end"
)

// Event is what the EPP sees of a scheduled request's response, at
// simulated time AtNs.
type Event struct {
	Kind         string  `json:"kind"`
	ID           string  `json:"id"`
	AtNs         int64   `json:"at_ns"`
	TransferMs   float64 `json:"transfer_ms,omitempty"`
	OutputTokens int     `json:"output_tokens,omitempty"`
}

// EventsRequest delivers events; with Flush the Headroom producers then
// post the training entries they hold, before the answer.
type EventsRequest struct {
	Events []Event `json:"events,omitempty"`
	Flush  bool    `json:"flush,omitempty"`
}

// Report is what a router's Headroom plugins did, from their own metrics:
// headroom_epp_decisions_total by outcome (scored, or the reason the stock
// scorers decided) and headroom_epp_training_entries_total by result. Both
// are empty for a config without Headroom's plugins.
type Report struct {
	Decisions       map[string]int `json:"decisions"`
	TrainingEntries map[string]int `json:"training_entries"`
}
