module github.com/refundkit/refundkit

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0
	github.com/google/renameio/v2 v2.0.2
	github.com/rogpeppe/go-internal v1.16.0
	github.com/stripe/stripe-go/v76 v76.25.0
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.44.0
	golang.org/x/time v0.16.0
)

require (
	github.com/stretchr/testify v1.9.0 // indirect
	golang.org/x/tools v0.26.0 // indirect
)
