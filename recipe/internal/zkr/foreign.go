package zkr

import (
	"log/slog"

	"github.com/roomlog/roomlog/zkx"
)

// Foreign and ForeignSet are zkx's (one implementation for the recipes and
// package replica).
type (
	Foreign    = zkx.Foreign
	ForeignSet = zkx.ForeignSet
)

// NewForeignSet is zkx.NewForeignSet.
func NewForeignSet(log *slog.Logger, what string) *ForeignSet { return zkx.NewForeignSet(log, what) }
