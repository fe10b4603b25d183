package journal

import "testing"

func TestHolderFindsTheItemCreditedWithARefund(t *testing.T) {
	s := NewState()
	credit := func(item, refund, status string) {
		s.Apply(&Record{V: Version, Type: TypeIntent, Batch: "b", Item: item, Charge: "ch_" + item, Attempt: 1})
		s.Apply(&Record{V: Version, Type: TypeRefunded, Batch: "b", Item: item, Charge: "ch_" + item, Attempt: 1, Refund: refund, Amount: 100, Currency: "usd", Status: status})
	}
	credit("i1", "re_1", "succeeded")
	credit("i2", "re_2", PendingStatus)
	s.Apply(&Record{V: Version, Type: TypeIntent, Batch: "b", Item: "i3", Charge: "ch_i3", Attempt: 1})
	for _, tc := range []struct{ refund, item string }{{"re_1", "i1"}, {"re_2", "i2"}, {"re_3", ""}, {"", ""}} {
		batch, item, ok := s.Holder(tc.refund)
		if ok != (tc.item != "") || item != tc.item || ok && batch != "b" {
			t.Errorf("Holder(%q) = %q %q %v, want item %q", tc.refund, batch, item, ok, tc.item)
		}
	}
	// Built once, the index follows later records.
	credit("i3", "re_3", "succeeded")
	if _, item, ok := s.Holder("re_3"); !ok || item != "i3" {
		t.Errorf("Holder(re_3) after it was credited: %q %v, want i3", item, ok)
	}
	// A second item credited with a refund id, against the rule: the
	// first one stays its holder.
	credit("i4", "re_1", "succeeded")
	if _, item, ok := s.Holder("re_1"); !ok || item != "i1" {
		t.Errorf("Holder(re_1) = %q %v, want the first, i1", item, ok)
	}
}
