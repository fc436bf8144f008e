//! Gives `libxtcq.so` a soname (`libxtcq.so.0`), so that a program linked against it keeps
//! asking for ABI 0 while `make install` lays out `libxtcq.so.0.x.y` and its links, the
//! way C libraries are installed. Bump the number on an incompatible C API change.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libxtcq.so.0");
}
