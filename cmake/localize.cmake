# cmake -DCC=... -DOBJCOPY=... -DOUT=file.o -DOBJECTS="a.o;b.o;..." -P localize.cmake
#
# libremat.a's one object: the library's objects partially linked (cc -r)
# into one relocatable object, in which objcopy then makes every defined
# symbol local except remat_* and REMAT_* (the public API). The objects
# call each other through hidden names (rm_*, ck_*, pl_*, ...); linked into
# one they resolve inside it, so those names need not be global, and a
# program's own rm_init or pl_solve can no longer clash with remat's.
# Only symbol bindings change: the code is the same bytes as in the
# shared library and remat_internal.
if(NOT CC OR NOT OBJCOPY OR NOT OUT OR NOT OBJECTS)
  message(FATAL_ERROR "localize.cmake: CC, OBJCOPY, OUT and OBJECTS are required")
endif()
set(tmp ${OUT}.partial.o)
execute_process(COMMAND ${CC} -r -nostdlib -o ${tmp} ${OBJECTS} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "localize.cmake: partial link (${CC} -r) failed")
endif()
execute_process(COMMAND ${OBJCOPY} --wildcard --keep-global-symbol=remat_*
                        --keep-global-symbol=REMAT_* ${tmp} ${OUT} RESULT_VARIABLE rc)
file(REMOVE ${tmp})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "localize.cmake: ${OBJCOPY} failed")
endif()
