package store

// FileHolds is fileHolds for the external tests of the package.
var FileHolds = fileHolds
