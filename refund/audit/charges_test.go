package audit_test

import "github.com/refundkit/refundkit/refund/audit"

// withCharges gives the audit the simulator's charges, as the audit
// command does, so a refund without metadata can be matched to a
// full-refund item by the charge's amount.
func withCharges(opts *audit.Options, s *sim) { opts.Charges = audit.NewCharges(s.url, testKey) }
