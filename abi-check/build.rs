//! Reads `include/lmdbio.h` with bindgen (clang) and writes two files into
//! `OUT_DIR`: `c.rs`, the header's declarations as bindgen sees them, and
//! `checks.rs`, compile-time checks of every constant, function and struct
//! of the header against `lmdbio::ffi`. Nothing here lists the ABI by hand:
//! a new `#define`, function or struct in the header is checked as soon as
//! it is there, and a missing or different Rust counterpart is a compile
//! error naming it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::visit_mut::VisitMut;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let header = manifest.join("../include/lmdbio.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-env-changed=MPICC");

    let mpi = build_probe_mpi::probe()
        .unwrap_or_else(|e| panic!("no MPI found for <mpi.h> (set MPICC): {e:?}"));
    let c_side = bindgen::Builder::default()
        .header(header.display().to_string())
        .clang_args(
            mpi.include_paths
                .iter()
                .map(|p| format!("-I{}", p.display())),
        )
        .allowlist_function("lmdbio_.*")
        .allowlist_var("LMDBIO_.*")
        .allowlist_type("lmdbio_.*")
        // C enumerators keep their own names, as the Rust side must.
        .prepend_enum_name(false)
        // bindgen's layout tests tie its structs to clang's layout; the
        // checks below tie lmdbio's structs to bindgen's.
        .layout_tests(true)
        .derive_debug(false)
        .derive_copy(false)
        .generate()
        .expect("bindgen could not read include/lmdbio.h")
        .to_string();
    std::fs::write(out_dir.join("c.rs"), &c_side).unwrap();

    let file = syn::parse_file(&c_side).expect("bindgen's output parses");
    // One item a line, so that a compile error's line shows the item.
    let checks: Vec<String> = checks(&file).iter().map(|c| c.to_string()).collect();
    std::fs::write(out_dir.join("checks.rs"), checks.join("\n")).unwrap();
}

/// The checks for every item bindgen found in the header.
fn checks(file: &syn::File) -> Vec<TokenStream> {
    // Types the header names (its structs, typedefs such as MPI_Comm).
    let declared: BTreeSet<String> = file
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Struct(s) => Some(s.ident.to_string()),
            syn::Item::Type(t) => Some(t.ident.to_string()),
            _ => None,
        })
        .collect();
    let mut rust_types = ToRustSide { declared };

    let mut out = Vec::new();
    let mut functions = Vec::new();
    let mut constants = Vec::new();
    for item in &file.items {
        match item {
            // `const _` items are bindgen's layout tests.
            syn::Item::Const(c) if c.ident != "_" => {
                let name = &c.ident;
                let text = name.to_string();
                let message = format!("{text} differs between include/lmdbio.h and lmdbio::ffi");
                out.push(quote! {
                    const _: () = assert!(
                        lmdbio::ffi::#name as i128 == crate::c::#name as i128,
                        #message
                    );
                });
                constants.push(quote! { (#text, crate::c::#name as i128) });
            }
            syn::Item::ForeignMod(m) => {
                for f in &m.items {
                    if let syn::ForeignItem::Fn(f) = f {
                        out.push(signature_check(&f.sig, &mut rust_types));
                        functions.push(f.sig.ident.to_string());
                    }
                }
            }
            // Others are what <mpi.h>'s typedefs point to (Open MPI's
            // ompi_communicator_t), checked through the typedef.
            syn::Item::Struct(s) if s.ident.to_string().starts_with("lmdbio_") => {
                out.push(struct_check(s, &mut rust_types))
            }
            syn::Item::Type(t) => out.push(alias_check(&t.ident)),
            _ => {}
        }
    }
    out.push(quote! {
        /// Every function the header declares.
        pub const HEADER_FUNCTIONS: &[&str] = &[#(#functions),*];
        /// Every integer constant the header defines, with its value.
        pub const HEADER_CONSTANTS: &[(&str, i128)] = &[#(#constants),*];
    });
    out
}

/// `lmdbio::ffi::NAME` must coerce to the function pointer type of the
/// header's `NAME`.
fn signature_check(sig: &syn::Signature, rust_types: &mut ToRustSide) -> TokenStream {
    let name = &sig.ident;
    let check = format_ident!("signature_of_{}", name);
    let mut args: Vec<syn::Type> = sig
        .inputs
        .iter()
        .map(|a| match a {
            syn::FnArg::Typed(t) => (*t.ty).clone(),
            syn::FnArg::Receiver(_) => unreachable!("C has no methods"),
        })
        .collect();
    let mut output = sig.output.clone();
    for a in &mut args {
        rust_types.visit_type_mut(a);
    }
    rust_types.visit_return_type_mut(&mut output);
    quote! {
        #[allow(dead_code)]
        fn #check() {
            let _: unsafe extern "C" fn(#(#args),*) #output = lmdbio::ffi::#name;
        }
    }
}

/// Size, alignment, field offsets and field types of `lmdbio::ffi::NAME`
/// equal those of the header's struct; an opaque struct must exist.
fn struct_check(s: &syn::ItemStruct, rust_types: &mut ToRustSide) -> TokenStream {
    let name = &s.ident;
    let text = name.to_string();
    let fields: Vec<&syn::Field> = s.fields.iter().collect();
    let opaque = fields
        .iter()
        .all(|f| f.ident.as_ref().is_some_and(|i| i == "_unused"));
    if opaque {
        let check = format_ident!("opaque_{}", name);
        return quote! {
            #[allow(dead_code)]
            fn #check(_: *const lmdbio::ffi::#name) {}
        };
    }
    let size = format!("size of {text} differs between include/lmdbio.h and lmdbio::ffi");
    let align = format!("alignment of {text} differs between include/lmdbio.h and lmdbio::ffi");
    let mut offsets = TokenStream::new();
    let mut types = TokenStream::new();
    for f in &fields {
        let field = f.ident.as_ref().expect("C fields have names");
        let message =
            format!("offset of {text}.{field} differs between include/lmdbio.h and lmdbio::ffi");
        offsets.extend(quote! {
            assert!(
                ::core::mem::offset_of!(lmdbio::ffi::#name, #field)
                    == ::core::mem::offset_of!(crate::c::#name, #field),
                #message
            );
        });
        let mut ty = f.ty.clone();
        rust_types.visit_type_mut(&mut ty);
        types.extend(quote! { let _: &#ty = &s.#field; });
    }
    let check = format_ident!("field_types_of_{}", name);
    quote! {
        const _: () = {
            assert!(
                ::core::mem::size_of::<lmdbio::ffi::#name>()
                    == ::core::mem::size_of::<crate::c::#name>(),
                #size
            );
            assert!(
                ::core::mem::align_of::<lmdbio::ffi::#name>()
                    == ::core::mem::align_of::<crate::c::#name>(),
                #align
            );
            #offsets
        };
        #[allow(dead_code)]
        fn #check(s: &lmdbio::ffi::#name) {
            #types
        }
    }
}

/// A typedef the header uses (`MPI_Comm`) has the C side's size and
/// alignment in `lmdbio::ffi`.
fn alias_check(name: &syn::Ident) -> TokenStream {
    let message = format!("{name} differs between <mpi.h> as bindgen reads it and lmdbio::ffi");
    quote! {
        const _: () = assert!(
            ::core::mem::size_of::<lmdbio::ffi::#name>() == ::core::mem::size_of::<crate::c::#name>()
                && ::core::mem::align_of::<lmdbio::ffi::#name>()
                    == ::core::mem::align_of::<crate::c::#name>(),
            #message
        );
    }
}

/// Rewrites a type from bindgen's output into lmdbio's: every type the
/// header names (its structs, and `MPI_Comm` from `<mpi.h>`) must be
/// declared by `lmdbio::ffi` under the same name.
struct ToRustSide {
    declared: BTreeSet<String>,
}

impl VisitMut for ToRustSide {
    fn visit_type_path_mut(&mut self, path: &mut syn::TypePath) {
        if path.qself.is_none() && path.path.segments.len() == 1 {
            let ident = path.path.segments[0].ident.clone();
            let name = ident.to_string();
            if self.declared.contains(&name) {
                *path = syn::parse_quote!(lmdbio::ffi::#ident);
                return;
            }
        }
        syn::visit_mut::visit_type_path_mut(self, path);
    }
}
