module github.com/refundkit/refundkit

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0
	github.com/google/renameio/v2 v2.0.2
	github.com/jackc/pgx/v5 v5.12.0
	github.com/rogpeppe/go-internal v1.16.0
	github.com/stripe/stripe-go/v76 v76.25.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.44.0
	golang.org/x/time v0.16.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	golang.org/x/tools v0.48.0 // indirect
)
