module github.com/tensorpress/tensorpress

go 1.25.0

require (
	github.com/DataDog/zstd v1.5.7
	github.com/klauspost/compress v1.20.3
	github.com/ulikunitz/xz v0.5.17
	golang.org/x/term v0.45.0
)

require golang.org/x/sys v0.47.0 // indirect
