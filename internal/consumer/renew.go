package consumer

import "context"

// Renew renews the leases of held messages, one call per claim token
// (byToken), and returns for each id of a call that succeeded whether the
// database still had its lease: true, renewed; false, lost (claimed again,
// by anyone, or recovered). The ids of a call that failed are not in the
// result (their leases may still hold); failed is told of each such call.
func Renew[T comparable](ctx context.Context, byToken map[T][]int64,
	renew func(ctx context.Context, token T, ids []int64) ([]int64, error),
	failed func(err error, ids []int64)) map[int64]bool {
	kept := map[int64]bool{}
	for tok, ids := range byToken {
		got, err := renew(ctx, tok, ids)
		if err != nil {
			failed(err, ids)
			continue
		}
		for _, id := range ids {
			kept[id] = false
		}
		for _, id := range got {
			kept[id] = true
		}
	}
	return kept
}
