# Every dependency is a Debian package; a missing one stops the configure step with the
# package to install. scripts/setup.sh installs all of them.
function(attend_missing what package)
  message(FATAL_ERROR
    "attend: ${what} was not found. Install it with:\n"
    "    sudo apt-get install ${package}\n"
    "or run scripts/setup.sh, which installs everything attend needs.")
endfunction()

find_package(OpenMP COMPONENTS CXX)
if(NOT OpenMP_CXX_FOUND)
  attend_missing("OpenMP" "libgomp1 (it comes with g++)")
endif()

find_package(HDF5 COMPONENTS C)
if(NOT HDF5_FOUND)
  attend_missing("HDF5 (C API)" "libhdf5-dev")
endif()

find_package(spdlog CONFIG)
if(NOT spdlog_FOUND)
  attend_missing("spdlog" "libspdlog-dev")
endif()

find_package(CLI11 CONFIG)
if(NOT CLI11_FOUND)
  attend_missing("CLI11" "libcli11-dev")
endif()

find_package(nlohmann_json CONFIG)
if(NOT nlohmann_json_FOUND)
  attend_missing("nlohmann-json" "nlohmann-json3-dev")
endif()

if(ATTEND_BUILD_TESTS)
  find_package(doctest CONFIG)
  if(NOT doctest_FOUND)
    attend_missing("doctest" "doctest-dev")
  endif()
endif()

# MPI (OpenMPI: libopenmpi-dev, openmpi-bin) for data-parallel training (train/dist.h).
# Optional: without it attend trains in one process and says so if an MPI launcher starts
# it as several. -DATTEND_MPI=OFF builds without it even where it is installed.
option(ATTEND_MPI "Data-parallel training over MPI, when MPI is installed" ON)
if(ATTEND_MPI)
  find_package(MPI COMPONENTS C)
  if(NOT MPI_C_FOUND)
    message(STATUS "attend: MPI not found (sudo apt-get install libopenmpi-dev openmpi-bin): "
                   "building for one process")
    set(ATTEND_MPI OFF)
  endif()
endif()
