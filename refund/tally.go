package refund

import (
	"context"
	"time"
)

// BatchInfo is a batch whose plan a shared checkpoint holds, with its
// items counted by status (journal.Status's names; "duplicate" for an item
// refunded more than once, "unknown" for one never started).
type BatchInfo struct {
	Batch    string         `json:"batch"`
	Items    int64          `json:"items"`
	LoadedAt time.Time      `json:"loaded_at"`
	LoadedBy string         `json:"loaded_by"`
	ByStatus map[string]int `json:"by_status"`
}

// Tallier is a shared checkpoint that counts the batches of the plan this
// run loaded: every worker's items, so that a run can say whether the
// batch is done.
type Tallier interface {
	Progress(ctx context.Context) ([]BatchInfo, error)
}
