package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Architecture is what the step-time model needs to know of a transformer:
// the shapes that set its FLOPs and bytes per token. It is read from a
// HuggingFace config.json (ReadArchitecture); a dense model has Experts 0.
type Architecture struct {
	Name         string `json:"name"`
	Layers       int    `json:"layers"`
	Hidden       int    `json:"hidden"`
	Heads        int    `json:"heads"`
	KVHeads      int    `json:"kv_heads"`
	HeadDim      int    `json:"head_dim"`
	Intermediate int    `json:"intermediate"` // the dense MLP's width; for MoE, one expert's
	Vocab        int    `json:"vocab"`
	// Experts is the routed experts per MoE layer and ActiveExperts how
	// many each token uses (top-k); SharedIntermediate the width of the
	// shared experts every token also uses (0: none).
	Experts            int `json:"experts,omitempty"`
	ActiveExperts      int `json:"active_experts,omitempty"`
	SharedIntermediate int `json:"shared_intermediate,omitempty"`
	// GatedMLP is the three-matrix MLP (gate, up, down) of SiLU-gated
	// models; false for the two-matrix GELU/ReLU MLP.
	GatedMLP bool `json:"gated_mlp"`
	// BytesPerParam is the weights' and activations' element size (2 for
	// bf16 and fp16); the KV cache is stored at the same size (vLLM's
	// kv_cache_dtype auto).
	BytesPerParam  float64 `json:"bytes_per_param"`
	TiedEmbeddings bool    `json:"tied_embeddings"`
}

// hfConfig is the part of a HuggingFace config.json that Architecture
// reads. Multimodal models nest the language model under text_config.
type hfConfig struct {
	Architectures []string        `json:"architectures"`
	Layers        int             `json:"num_hidden_layers"`
	Hidden        int             `json:"hidden_size"`
	Heads         int             `json:"num_attention_heads"`
	KVHeads       int             `json:"num_key_value_heads"`
	HeadDim       int             `json:"head_dim"`
	Intermediate  int             `json:"intermediate_size"`
	Vocab         int             `json:"vocab_size"`
	HiddenAct     string          `json:"hidden_act"`
	TorchDtype    string          `json:"torch_dtype"`
	Dtype         string          `json:"dtype"`
	TieEmbeddings bool            `json:"tie_word_embeddings"`
	LocalExperts  int             `json:"num_local_experts"` // Mixtral
	NumExperts    int             `json:"num_experts"`       // Qwen-MoE
	RoutedExperts int             `json:"n_routed_experts"`  // DeepSeek
	ExpertsPerTok int             `json:"num_experts_per_tok"`
	MoEInter      int             `json:"moe_intermediate_size"`
	SharedInter   int             `json:"shared_expert_intermediate_size"`
	SharedExperts int             `json:"n_shared_experts"`
	KVLoraRank    int             `json:"kv_lora_rank"`
	FirstDense    int             `json:"first_k_dense_replace"`
	DecoderSparse int             `json:"decoder_sparse_step"`
	RawTextConfig json.RawMessage `json:"text_config"`
	QuantConfig   json.RawMessage `json:"quantization_config"`
}

// ReadArchitecture reads a HuggingFace config.json.
func ReadArchitecture(path string) (Architecture, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Architecture{}, fmt.Errorf("read model config: %w", err)
	}
	a, err := ParseArchitecture(data)
	if err != nil {
		return Architecture{}, fmt.Errorf("model config %s: %w", path, err)
	}
	return a, nil
}

// ParseArchitecture reads the architecture from a HuggingFace config.json's
// bytes. It refuses what the step-time model cannot price: multi-head
// latent attention (DeepSeek's kv_lora_rank), models mixing dense and MoE
// layers, and weights quantized below their activation type.
func ParseArchitecture(data []byte) (Architecture, error) {
	var c hfConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return Architecture{}, fmt.Errorf("decode: %w", err)
	}
	if len(c.RawTextConfig) > 0 && c.Layers == 0 {
		var t hfConfig
		if err := json.Unmarshal(c.RawTextConfig, &t); err != nil {
			return Architecture{}, fmt.Errorf("decode text_config: %w", err)
		}
		if len(t.Architectures) == 0 {
			t.Architectures = c.Architectures
		}
		if t.TorchDtype == "" && t.Dtype == "" {
			t.TorchDtype, t.Dtype = c.TorchDtype, c.Dtype
		}
		c = t
	}
	switch {
	case c.KVLoraRank > 0:
		return Architecture{}, fmt.Errorf("multi-head latent attention (kv_lora_rank %d) is not modelled", c.KVLoraRank)
	case c.FirstDense > 0 || c.DecoderSparse > 1:
		return Architecture{}, fmt.Errorf("models mixing dense and MoE layers are not modelled")
	case len(c.QuantConfig) > 0 && string(c.QuantConfig) != "null":
		return Architecture{}, fmt.Errorf("quantized weights (quantization_config) are not modelled")
	}
	a := Architecture{
		Layers: c.Layers, Hidden: c.Hidden, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim,
		Intermediate: c.Intermediate, Vocab: c.Vocab, TiedEmbeddings: c.TieEmbeddings,
		Experts: max(c.LocalExperts, c.NumExperts, c.RoutedExperts), ActiveExperts: c.ExpertsPerTok,
		SharedIntermediate: c.SharedInter,
	}
	if len(c.Architectures) > 0 {
		a.Name = c.Architectures[0]
	}
	if a.KVHeads == 0 {
		a.KVHeads = a.Heads
	}
	if a.HeadDim == 0 && a.Heads > 0 {
		a.HeadDim = a.Hidden / a.Heads
	}
	if a.Experts > 0 && c.MoEInter > 0 {
		a.Intermediate = c.MoEInter
	}
	if a.Experts > 0 && c.SharedExperts > 0 && a.SharedIntermediate == 0 {
		a.SharedIntermediate = c.SharedExperts * a.Intermediate
	}
	switch act := strings.ToLower(c.HiddenAct); act {
	case "gelu", "gelu_new", "relu", "gelu_fast":
		a.GatedMLP = false
	default: // silu, swiglu, gelu_pytorch_tanh (Gemma's gated GELU), or unset
		a.GatedMLP = true
	}
	dtype := c.TorchDtype
	if dtype == "" {
		dtype = c.Dtype
	}
	switch strings.ToLower(dtype) {
	case "", "bfloat16", "float16", "half", "bf16", "fp16":
		a.BytesPerParam = 2
	case "float32", "float", "fp32":
		a.BytesPerParam = 4
	case "float8_e4m3fn", "fp8", "float8":
		a.BytesPerParam = 1
	default:
		return Architecture{}, fmt.Errorf("torch_dtype %q: want bfloat16, float16, float32 or float8", dtype)
	}
	return a, a.Validate()
}

// Validate reports the first shape the model cannot be priced with.
func (a Architecture) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"num_hidden_layers", a.Layers}, {"hidden_size", a.Hidden}, {"num_attention_heads", a.Heads},
		{"num_key_value_heads", a.KVHeads}, {"head_dim", a.HeadDim}, {"intermediate_size", a.Intermediate},
		{"vocab_size", a.Vocab}} {
		if f.v <= 0 {
			return fmt.Errorf("architecture: %s = %d, need a positive number", f.name, f.v)
		}
	}
	switch {
	case a.Heads%a.KVHeads != 0:
		return fmt.Errorf("architecture: %d attention heads do not group into %d KV heads", a.Heads, a.KVHeads)
	case a.Experts > 0 && (a.ActiveExperts < 1 || a.ActiveExperts > a.Experts):
		return fmt.Errorf("architecture: %d of %d experts per token", a.ActiveExperts, a.Experts)
	case a.Experts == 0 && a.ActiveExperts > 0:
		return fmt.Errorf("architecture: %d experts per token without experts", a.ActiveExperts)
	case !(a.BytesPerParam > 0):
		return fmt.Errorf("architecture: bytes per parameter %v", a.BytesPerParam)
	}
	return nil
}

// MoE says the MLP is a mixture of experts.
func (a Architecture) MoE() bool { return a.Experts > 0 }

// KVBytesPerToken is one token's KV cache over the whole model: K and V of
// every layer and KV head.
func (a Architecture) KVBytesPerToken() float64 {
	return float64(a.Layers) * 2 * float64(a.KVHeads*a.HeadDim) * a.BytesPerParam
}

// attentionParams is one layer's attention weights: the Q, K, V and output
// projections.
func (a Architecture) attentionParams() float64 {
	q, kv := float64(a.Heads*a.HeadDim), float64(a.KVHeads*a.HeadDim)
	h := float64(a.Hidden)
	return h*q + 2*h*kv + q*h
}

// mlpParams is the weights of one MLP of width inter.
func (a Architecture) mlpParams(inter int) float64 {
	m := 2.0
	if a.GatedMLP {
		m = 3
	}
	return m * float64(a.Hidden) * float64(inter)
}

// denseLayerParams is one layer's weights every token uses: attention, the
// dense MLP (or the shared experts and the router of an MoE layer).
func (a Architecture) denseLayerParams() float64 {
	if !a.MoE() {
		return a.attentionParams() + a.mlpParams(a.Intermediate)
	}
	p := a.attentionParams() + float64(a.Hidden*a.Experts)
	if a.SharedIntermediate > 0 {
		p += a.mlpParams(a.SharedIntermediate)
	}
	return p
}

// expertParams is one routed expert's weights (0 for a dense model).
func (a Architecture) expertParams() float64 {
	if !a.MoE() {
		return 0
	}
	return a.mlpParams(a.Intermediate)
}

// headParams is the output projection to the vocabulary.
func (a Architecture) headParams() float64 { return float64(a.Vocab * a.Hidden) }

// WeightBytes is the whole model's weights: every layer, every expert, the
// embeddings and, unless tied to them, the output head.
func (a Architecture) WeightBytes() float64 {
	p := float64(a.Layers)*(a.denseLayerParams()+float64(a.Experts)*a.expertParams()) + a.headParams()
	if !a.TiedEmbeddings {
		p += a.headParams()
	}
	return p * a.BytesPerParam
}
