module github.com/tensorpress/tensorpress

go 1.25.0

require (
	github.com/DataDog/zstd v1.5.7 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/ulikunitz/xz v0.5.17 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
)
