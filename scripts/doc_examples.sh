#!/bin/sh
# scripts/doc_examples.sh — the examples in the docs are the program's own output.
#
#   scripts/doc_examples.sh REMAT [--update] FILE...
#
# A marked example in a Markdown FILE is
#
#   <!-- example[ exit=N][ stderr]: ARGS -->
#   ```
#   $ remat ARGS
#   ...output...
#   ```
#   <!-- /example -->
#
# With --update each ARGS is run (`REMAT ARGS`, in a scratch directory, stdout only
# unless `stderr` is given; exit status N, default 0) and the fenced block is rewritten
# with the command and its output (`make doc-examples` does it for README.md and docs/).
# Without --update (CTest `doc_examples`) each command must still run with its exit
# status and print output of the documented shape: the same lines once numbers, runs of
# spaces, plan structures and the noise mark are set aside. Exit status 1 names the
# examples that differ, with both versions.
set -u
remat=$1
shift
update=0
if [ "${1:-}" = "--update" ]; then update=1; shift; fi
case $remat in /*) ;; *) remat=$(pwd)/$remat ;; esac
[ -x "$remat" ] || { echo "doc_examples: $remat is not an executable" >&2; exit 2; }
scratch=$(mktemp -d) || exit 2
trap 'rm -rf "$scratch"' EXIT INT TERM

# The shape of a text: numbers (and their k/M or byte units), widths, plan structures,
# which plan actions and the ~ (within noise) mark vary from run to run; the lines and
# their words do not. Nor does a plan's table of stages (remat_plan_print's "stage action
# fwd runs" rows): the planner may run the last blocks in halves, two stages each.
shape() {
    grep -v 'within noise' "$1" |
        sed -E -e 's/recomputed: .*/recomputed: .../' -e 's/structure: .*/structure: .../' \
            -e 's/~//g' \
            -e 's/\b(store|checkpoint|recompute)\b/ACTION/g' \
            -e 's/[0-9]+(\.[0-9]+)?/#/g' -e 's/#[kM]\b/#/g' -e 's/# ?(B|KiB|MiB|GiB)\b/# BYTES/g' \
            -e 's/[ \t]+/ /g' -e 's/ $//' -e 's/;$//' |
        grep -v '^ # ACTION #$'
}

status=0
for file in "$@"; do
    out=$scratch/new.md
    : > "$out"
    n=0
    # line-by-line: copy, and replace each marked block's fenced body
    state=copy
    while IFS= read -r line || [ -n "$line" ]; do
        case $state in
        copy)
            printf '%s\n' "$line" >> "$out"
            case $line in
            '<!-- example'*'-->')
                spec=${line#<!-- example}
                spec=${spec%-->}
                flags=${spec%%:*}
                args=${spec#*:}
                args=$(printf '%s' "$args" | sed -e 's/^ *//' -e 's/ *$//')
                want=0
                err=0
                for f in $flags; do
                    case $f in exit=*) want=${f#exit=} ;; stderr) err=1 ;; esac
                done
                n=$((n + 1))
                state=fence
                ;;
            esac
            ;;
        fence) # the opening ``` of the block
            printf '%s\n' "$line" >> "$out"
            : > "$scratch/doc"
            state=body
            ;;
        body)
            case $line in
            '```')
                # run it (once per command line: README and docs/cli.md share one)
                key=$(printf '%s %s' "$err" "$args" | cksum | tr ' ' _)
                rundir=$scratch/run$key
                if [ -f "$rundir.rc" ]; then
                    cp "$rundir.out" "$scratch/got"
                    rc=$(cat "$rundir.rc")
                else
                    mkdir -p "$rundir"
                    if [ $err = 1 ]; then
                        (cd "$rundir" && eval "\"$remat\" $args" > "$scratch/got" 2>&1 < /dev/null)
                    else
                        (cd "$rundir" && eval "\"$remat\" $args" > "$scratch/got" 2> "$scratch/stderr" < /dev/null)
                    fi
                    rc=$?
                    cp "$scratch/got" "$rundir.out"
                    echo "$rc" > "$rundir.rc"
                fi
                if [ "$rc" != "$want" ]; then
                    echo "doc_examples: $file: \`remat $args\` exited $rc, documented $want" >&2
                    [ $err = 0 ] && tail -5 "$scratch/stderr" >&2
                    status=1
                fi
                if [ $update = 1 ]; then
                    printf '$ remat %s\n' "$args" >> "$out"
                    cat "$scratch/got" >> "$out"
                else
                    sed '1{/^\$ remat /d}' "$scratch/doc" > "$scratch/doc_body"
                    shape "$scratch/doc_body" > "$scratch/a"
                    shape "$scratch/got" > "$scratch/b"
                    if ! cmp -s "$scratch/a" "$scratch/b"; then
                        echo "doc_examples: $file: the output of \`remat $args\` no longer has the documented shape (scripts/doc_examples.sh --update rewrites it):" >&2
                        diff "$scratch/a" "$scratch/b" | head -20 >&2
                        status=1
                    fi
                    cat "$scratch/doc" >> "$out"
                fi
                printf '%s\n' "$line" >> "$out"
                state=close
                ;;
            *) printf '%s\n' "$line" >> "$scratch/doc" ;;
            esac
            ;;
        close)
            printf '%s\n' "$line" >> "$out"
            case $line in '<!-- /example -->') state=copy ;; esac
            ;;
        esac
    done < "$file"
    if [ $state != copy ]; then
        echo "doc_examples: $file: an example is not closed with <!-- /example -->" >&2
        status=1
    elif [ $update = 1 ]; then
        cp "$out" "$file"
    fi
    [ $n -gt 0 ] || { echo "doc_examples: $file has no marked example" >&2; status=1; }
    echo "doc_examples: $file: $n example(s) $( [ $update = 1 ] && echo rewritten || echo checked)"
done
exit $status
